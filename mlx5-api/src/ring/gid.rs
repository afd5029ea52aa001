//! [`Gid`]: a 128-bit InfiniBand / RoCE global identifier, stored in wire
//! (network) byte order and printed as the IPv6 address it is.

use core::fmt;
use core::net::{Ipv4Addr, Ipv6Addr};
use core::str::FromStr;

/// A port's or destination's global identifier (`union ibv_gid`): 16 bytes
/// in network order, printed as IPv6 (`fe80::1`, or `::ffff:10.0.0.1` for
/// the IPv4-mapped GIDs of RoCE v2 over IPv4).
///
/// ```
/// use mlx5_api::ring::Gid;
/// let gid = Gid::from_ipv4([10, 0, 0, 1]);
/// assert_eq!(gid.to_string(), "::ffff:10.0.0.1");
/// assert_eq!("fe80::2".parse::<Gid>().unwrap().raw()[15], 2);
/// ```
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(transparent)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(into = "Ipv6Addr", from = "Ipv6Addr"))]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// The all-zero GID (an unset table entry).
    pub const ZERO: Gid = Gid([0; 16]);

    /// The 16 bytes, network order (as they go into an address vector).
    #[inline(always)]
    pub const fn raw(&self) -> [u8; 16] {
        self.0
    }

    /// The IPv4-mapped GID `::ffff:a.b.c.d` (RoCE v2 over IPv4).
    pub const fn from_ipv4(ip: [u8; 4]) -> Gid {
        let mut g = [0u8; 16];
        g[10] = 0xff;
        g[11] = 0xff;
        g[12] = ip[0];
        g[13] = ip[1];
        g[14] = ip[2];
        g[15] = ip[3];
        Gid(g)
    }

    /// The link-local GID `fe80::<id>` (an InfiniBand port's GID 0 with
    /// the interface id `id`).
    pub const fn link_local(id: u64) -> Gid {
        let mut g = [0u8; 16];
        g[0] = 0xfe;
        g[1] = 0x80;
        let b = id.to_be_bytes();
        let mut i = 0;
        while i < 8 {
            g[8 + i] = b[i];
            i += 1;
        }
        Gid(g)
    }

    /// The IPv4 address of an IPv4-mapped GID, `None` otherwise.
    pub fn to_ipv4(&self) -> Option<Ipv4Addr> {
        Ipv6Addr::from(self.0).to_ipv4_mapped()
    }

    /// Whether this is the all-zero GID.
    pub fn is_zero(&self) -> bool {
        self.0 == [0; 16]
    }
}

impl fmt::Display for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&Ipv6Addr::from(self.0), f)
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gid({self})")
    }
}

impl From<[u8; 16]> for Gid {
    fn from(b: [u8; 16]) -> Gid {
        Gid(b)
    }
}

impl From<Gid> for [u8; 16] {
    fn from(g: Gid) -> [u8; 16] {
        g.0
    }
}

impl From<Ipv6Addr> for Gid {
    fn from(a: Ipv6Addr) -> Gid {
        Gid(a.octets())
    }
}

impl From<Gid> for Ipv6Addr {
    fn from(g: Gid) -> Ipv6Addr {
        Ipv6Addr::from(g.0)
    }
}

impl FromStr for Gid {
    type Err = core::net::AddrParseError;
    /// Parses IPv6 text (`fe80::1`, `::ffff:10.0.0.1`).
    fn from_str(s: &str) -> Result<Gid, Self::Err> {
        Ok(Gid(s.parse::<Ipv6Addr>()?.octets()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    extern crate std;
    use std::format;
    use std::string::ToString;

    #[test]
    fn prints_as_ipv6() {
        // RFC 5952 text, as `ibv_devinfo -v` prints GIDs.
        assert_eq!(Gid::link_local(0x0002_c903_0001_0203).to_string(), "fe80::2:c903:1:203");
        assert_eq!(Gid::from_ipv4([192, 168, 1, 7]).to_string(), "::ffff:192.168.1.7");
        assert_eq!(format!("{:?}", Gid::ZERO), "Gid(::)");
    }

    #[test]
    fn parses_back_and_maps_ipv4() {
        let g: Gid = "fe80::2:c903:1:203".parse().unwrap();
        assert_eq!(g, Gid::link_local(0x0002_c903_0001_0203));
        assert_eq!(Gid::from_ipv4([10, 0, 0, 1]).to_ipv4(), Some(Ipv4Addr::new(10, 0, 0, 1)));
        assert_eq!(g.to_ipv4(), None);
        assert!("not a gid".parse::<Gid>().is_err());
    }
}
