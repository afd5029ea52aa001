//! The fabric's network controls: link faults, the simulated clock, packet capture
//! (see [`crate::net`]).

use std::path::Path;

use crate::net::capture::Capture;
use crate::{Fabric, LinkFaults, LinkLayer, SimError};

impl Fabric {
    /// Faults of every link (each host pair in both directions) that has none of its
    /// own, drawn from a generator restarted with `seed`. In [`crate::ExecMode::Deterministic`]
    /// the same seed gives the same run. [`LinkFaults::none`] makes the links perfect
    /// again.
    ///
    /// With faults, RC and DC messages travel as packets with PSNs, ACKs and NAKs, are
    /// retransmitted after the QP's local ACK timeout (4.096 µs × 2^`timeout` of
    /// simulated time) up to `retry_cnt` times and are executed by the responder exactly
    /// once; a UD datagram the link loses is simply lost.
    pub fn set_faults(&self, seed: u64, faults: LinkFaults) {
        let mut st = self.front.state.all();
        st.net.seed(seed);
        st.net.set_default(faults);
        st.net_changed();
    }

    /// Carries every message over the packet wire (the network model: packets with PSNs,
    /// ACKs and NAKs on simulated time) even with no fault and no capture, or (`false`)
    /// only when faults or a capture ask for it. Results are the same on either wire; this
    /// is for measuring the packet wire and comparing the two.
    pub fn set_packet_wire(&self, on: bool) {
        let mut st = self.front.state.all();
        st.net.force = on;
        st.net_changed();
    }

    /// Faults of the link between the hosts named `a` and `b` (both directions).
    pub fn set_link_faults(&self, a: &str, b: &str, faults: LinkFaults) -> Result<(), SimError> {
        let mut st = self.front.state.all();
        let find = |n: &str| st.hosts.all().position(|h| h.cfg.name == n);
        let (Some(x), Some(y)) = (find(a), find(b)) else {
            return Err(SimError::InvalidArgument { what: "no host of that name" });
        };
        st.net.set_pair(x, y, faults);
        st.net_changed();
        Ok(())
    }

    /// The simulated time in nanoseconds: advanced by packets on the wire, ACK timeouts
    /// and RNR waits (it moves only while the network model runs: with faults or a
    /// capture).
    pub fn now_ns(&self) -> u64 {
        self.front.state.net().now_ns
    }

    /// Write every packet put on the wire from now on to the pcap file `path`: RoCE v2
    /// fabrics as Ethernet frames (Ethernet / IP / UDP 4791 / BTH… / ICRC), fabrics with
    /// InfiniBand hosts as ERF records of type 21 (LRH / BTH… / ICRC / VCRC), as ibdump
    /// writes them. Wireshark and tshark read both. A running capture is closed first.
    pub fn start_capture(&self, path: impl AsRef<Path>) -> std::io::Result<()> {
        let mut st = self.front.state.all();
        if let Some(old) = st.net.capture.take() {
            st.net_changed();
            old.finish()?;
        }
        let erf = st.hosts.all().any(|h| h.cfg.link_layer == LinkLayer::InfiniBand);
        st.net.capture = Some(Capture::create(path.as_ref(), erf)?);
        st.net_changed();
        Ok(())
    }

    /// Close the capture; returns how many packets it holds (0 when none ran).
    pub fn stop_capture(&self) -> std::io::Result<u64> {
        let cap = {
            let mut st = self.front.state.all();
            let cap = st.net.capture.take();
            st.net_changed();
            cap
        };
        match cap {
            Some(c) => {
                let n = c.packets;
                c.finish()?;
                Ok(n)
            }
            None => Ok(0),
        }
    }
}
