//! The network between the NICs of a fabric: a simulated clock, per-link faults drawn
//! from a seeded generator, and packet capture.
//!
//! With no faults configured and no capture running the engine never enters this module:
//! each RC message is executed in one step, as before. Otherwise every RC/DC message
//! travels as packets ([`transport`]) and every UD datagram is one packet that the link
//! may lose.

pub(crate) mod capture;
pub(crate) mod icrc;
pub mod noise;
pub(crate) mod packet;
pub(crate) mod roce;
pub(crate) mod transport;
pub mod udp;

/// Faults of one link (both directions between two hosts), drawn per packet.
///
/// Probabilities are in `0.0..=1.0`. Times are nanoseconds of the fabric's simulated
/// clock ([`crate::Fabric::now_ns`]).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LinkFaults {
    /// Probability that a packet is lost.
    pub drop: f64,
    /// Probability that a packet arrives corrupted: the receiver's ICRC check fails and
    /// it drops the packet (counted in [`crate::NicStats::icrc_errors`]).
    pub corrupt: f64,
    /// Probability that a packet arrives twice.
    pub duplicate: f64,
    /// Probability that a packet is held back by `reorder_ns`, so that later packets
    /// overtake it.
    pub reorder: f64,
    /// How long a reordered packet is held back.
    pub reorder_ns: u64,
    /// Fixed one-way delay added to every packet.
    pub delay_ns: u64,
    /// Random extra one-way delay, uniform in `0..jitter_ns`.
    pub jitter_ns: u64,
    /// The link is down from the first to the second time (`[from, until)`): every
    /// packet sent in that window is lost.
    pub down: Option<(u64, u64)>,
}

impl LinkFaults {
    /// No faults at all.
    pub fn none() -> Self {
        Self::default()
    }
    /// Whether this link never loses, delays, duplicates or reorders anything.
    pub fn is_perfect(&self) -> bool {
        *self == Self::default()
    }
}

/// Time between two packets a NIC puts on the wire back to back (the model's wire
/// time; nothing depends on its value except capture time stamps).
pub(crate) const PACKET_GAP_NS: u64 = 100;
/// One-way latency of a perfect link.
pub(crate) const LINK_LATENCY_NS: u64 = 500;

/// What became of one packet on the link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fate {
    /// Arrival times of the copies that arrive intact (none, one, or two when duplicated).
    pub arrivals: [Option<u64>; 2],
    /// Lost on the link (dropped, or the link was down).
    pub lost: bool,
    /// Arrived corrupted and was dropped by the receiver.
    pub corrupted: bool,
}

/// The fabric's network state (behind its own lock, taken after every host's).
#[derive(Debug)]
pub(crate) struct Net {
    /// Simulated time, ns.
    pub now_ns: u64,
    rng: u64,
    default: LinkFaults,
    /// Per host pair (smaller index first).
    pairs: Vec<((usize, usize), LinkFaults)>,
    /// Packet capture, when running.
    pub capture: Option<capture::Capture>,
    any_faults: bool,
    /// Every message as packets even with no fault and no capture
    /// ([`crate::Fabric::set_packet_wire`]).
    pub force: bool,
    /// The packets in flight of the delivery under way (kept for its storage).
    pub queue: transport::Queue,
    /// Unit tests: the fates of the next packets (true: lost), before any drawn ones.
    #[cfg(test)]
    pub script: std::collections::VecDeque<bool>,
}

impl Default for Net {
    fn default() -> Self {
        Net::new(0)
    }
}

impl Net {
    pub(crate) fn new(seed: u64) -> Self {
        Net {
            now_ns: 0,
            rng: seed,
            default: LinkFaults::none(),
            pairs: Vec::new(),
            capture: None,
            any_faults: false,
            force: false,
            queue: transport::Queue::default(),
            #[cfg(test)]
            script: std::collections::VecDeque::new(),
        }
    }

    /// Whether messages must travel as packets (faults, capture, or asked for).
    #[inline]
    pub(crate) fn active(&self) -> bool {
        self.any_faults || self.capture.is_some() || self.force
    }

    /// Restart the generator (same seed, same run).
    pub(crate) fn seed(&mut self, seed: u64) {
        self.rng = seed;
    }

    /// Faults of every link without its own setting.
    pub(crate) fn set_default(&mut self, f: LinkFaults) {
        self.default = f;
        self.update();
    }

    /// Faults of the link between hosts `a` and `b`.
    pub(crate) fn set_pair(&mut self, a: usize, b: usize, f: LinkFaults) {
        let key = (a.min(b), a.max(b));
        self.pairs.retain(|(k, _)| *k != key);
        self.pairs.push((key, f));
        self.update();
    }

    fn update(&mut self) {
        self.any_faults = !self.default.is_perfect() || self.pairs.iter().any(|(_, f)| !f.is_perfect());
    }

    pub(crate) fn faults(&self, a: usize, b: usize) -> LinkFaults {
        let key = (a.min(b), a.max(b));
        self.pairs.iter().find(|(k, _)| *k == key).map_or(self.default, |(_, f)| *f)
    }

    /// splitmix64.
    fn next(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// True with probability `p` (no draw when `p` is 0, so a perfect link consumes no
    /// randomness).
    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && ((self.next() >> 11) as f64 / (1u64 << 53) as f64) < p
    }

    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }

    fn arrival(&mut self, f: &LinkFaults, t: u64) -> u64 {
        let mut d = t + LINK_LATENCY_NS + f.delay_ns + self.below(f.jitter_ns);
        if self.chance(f.reorder) {
            d += f.reorder_ns;
        }
        d
    }

    /// The fate of one packet sent at `t` from host `a` to host `b`.
    #[inline]
    pub(crate) fn fate(&mut self, a: usize, b: usize, t: u64) -> Fate {
        #[cfg(test)]
        if let Some(lose) = self.script.pop_front() {
            let arrival = (!lose).then_some(t + LINK_LATENCY_NS);
            return Fate { arrivals: [arrival, None], lost: lose, corrupted: false };
        }
        if !self.any_faults {
            // Every link perfect (a capture, or the packet wire asked for): what the
            // draws below give for a perfect link, without looking.
            return Fate { arrivals: [Some(t + LINK_LATENCY_NS), None], lost: false, corrupted: false };
        }
        self.fate_drawn(a, b, t)
    }

    /// [`Net::fate`] on a fabric with faults somewhere.
    fn fate_drawn(&mut self, a: usize, b: usize, t: u64) -> Fate {
        let f = self.faults(a, b);
        let lost_fate = |corrupted: bool| Fate { arrivals: [None, None], lost: !corrupted, corrupted };
        if f.down.is_some_and(|(from, until)| t >= from && t < until) || self.chance(f.drop) {
            return lost_fate(false);
        }
        if self.chance(f.corrupt) {
            return lost_fate(true);
        }
        let first = self.arrival(&f, t);
        let second = if self.chance(f.duplicate) { Some(self.arrival(&f, t)) } else { None };
        Fate { arrivals: [Some(first), second], lost: false, corrupted: false }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_fates_and_perfect_links_draw_nothing() {
        let faults = LinkFaults { drop: 0.3, duplicate: 0.2, jitter_ns: 1000, ..LinkFaults::none() };
        let run = |seed| {
            let mut n = Net::new(seed);
            n.set_default(faults);
            (0..200).map(|i| n.fate(0, 1, i * 10)).collect::<Vec<_>>()
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
        let v = run(7);
        let lost = v.iter().filter(|f| f.lost).count();
        assert!((30..90).contains(&lost), "about 30% of 200 lost, got {lost}");
        assert!(v.iter().any(|f| f.arrivals[1].is_some()), "some duplicated");

        let mut n = Net::new(1);
        assert!(!n.active());
        let before = n.rng;
        let f = n.fate(0, 1, 5);
        assert_eq!((f.arrivals, n.rng), ([Some(5 + LINK_LATENCY_NS), None], before));
    }

    #[test]
    fn link_down_window_loses_everything_inside_it() {
        let mut n = Net::new(3);
        n.set_pair(1, 0, LinkFaults { down: Some((100, 200)), ..LinkFaults::none() });
        assert!(n.active());
        assert!(n.fate(0, 1, 99).arrivals[0].is_some());
        assert!(n.fate(1, 0, 100).lost && n.fate(0, 1, 199).lost);
        assert!(n.fate(0, 1, 200).arrivals[0].is_some());
        // Another pair is not affected.
        assert!(n.fate(0, 2, 150).arrivals[0].is_some());
    }
}
