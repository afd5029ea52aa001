//! Source GID selection and the port's MAC on RoCE, from sysfs.
//!
//! On InfiniBand the backend uses GID index 0 (the port GID). On RoCE the
//! GID table holds one entry per IP address and RoCE version; the backend
//! picks the **RoCE v2** entry, preferring an IPv4-mapped one
//! (`::ffff:a.b.c.d`), as read from
//! `/sys/class/infiniband/<dev>/ports/<p>/gid_attrs/types/<i>` (text
//! "RoCE v2" or "IB/RoCE v1") and `.../gids/<i>`. When sysfs cannot tell
//! (no such files, or no RoCE v2 entry), index 0 is used.
//!
//! The MAC of a RoCE port is that of the net device behind the chosen GID
//! (`.../gid_attrs/ndevs/<i>` → `/sys/class/net/<ndev>/address`); zero
//! when unknown. rdma-core (libibverbs) does not need it for RC (the kernel
//! resolves the destination MAC from the GID); UD and DC address vectors do.

use std::path::{Path, PathBuf};

/// One GID table entry as sysfs shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GidEntry {
    /// The index in the port's GID table.
    pub index: u32,
    /// `gid_attrs/types/<i>`; `None` when unreadable (empty entries read as EINVAL).
    pub gid_type: Option<String>,
    /// The GID, network order.
    pub gid: [u8; 16],
}

/// Whether `gid` is an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`).
pub fn is_ipv4_mapped(gid: &[u8; 16]) -> bool {
    gid[..10].iter().all(|&b| b == 0) && gid[10] == 0xff && gid[11] == 0xff
}

/// The RoCE v2 entry to use: IPv4-mapped first, then any non-zero RoCE v2
/// GID, lowest index first; `None` when there is none.
pub fn select_roce_v2(entries: &[GidEntry]) -> Option<u32> {
    let v2 = |e: &&GidEntry| {
        e.gid_type.as_deref().map(str::trim) == Some("RoCE v2") && e.gid.iter().any(|&b| b != 0)
    };
    entries
        .iter()
        .filter(v2)
        .find(|e| is_ipv4_mapped(&e.gid))
        .or_else(|| entries.iter().find(v2))
        .map(|e| e.index)
}

/// Parse a sysfs GID ("fe80:0000:0000:0000:0202:c9ff:fe00:0001").
pub fn parse_gid(s: &str) -> Option<[u8; 16]> {
    let groups: Vec<&str> = s.trim().split(':').collect();
    if groups.len() != 8 {
        return None;
    }
    let mut gid = [0u8; 16];
    for (i, g) in groups.iter().enumerate() {
        let v = u16::from_str_radix(g, 16).ok()?;
        gid[2 * i..2 * i + 2].copy_from_slice(&v.to_be_bytes());
    }
    Some(gid)
}

/// Parse a MAC ("aa:bb:cc:dd:ee:ff").
pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let parts: Vec<&str> = s.trim().split(':').collect();
    if parts.len() != 6 {
        return None;
    }
    let mut mac = [0u8; 6];
    for (i, p) in parts.iter().enumerate() {
        mac[i] = u8::from_str_radix(p, 16).ok()?;
    }
    Some(mac)
}

/// sysfs directory of one port of an RDMA device, under `root`
/// (`/sys/class/infiniband` in production, a temporary tree in tests).
pub fn port_dir(root: &Path, dev: &str, port: u8) -> PathBuf {
    root.join(dev).join("ports").join(port.to_string())
}

fn read_trimmed(p: &Path) -> Option<String> {
    std::fs::read_to_string(p).ok().map(|s| s.trim().to_string())
}

/// The GID table of a port as sysfs shows it, entries `0..tbl_len`.
pub fn read_gid_table(port_dir: &Path, tbl_len: u32) -> Vec<GidEntry> {
    (0..tbl_len)
        .map(|i| GidEntry {
            index: i,
            gid_type: read_trimmed(&port_dir.join("gid_attrs/types").join(i.to_string())),
            gid: read_trimmed(&port_dir.join("gids").join(i.to_string()))
                .and_then(|s| parse_gid(&s))
                .unwrap_or([0; 16]),
        })
        .collect()
}

/// Whether entry `index` is still a non-zero RoCE v2 GID (to revalidate a
/// cached choice cheaply).
pub fn still_roce_v2(port_dir: &Path, index: u32) -> bool {
    let t = read_trimmed(&port_dir.join("gid_attrs/types").join(index.to_string()));
    let g = read_trimmed(&port_dir.join("gids").join(index.to_string())).and_then(|s| parse_gid(&s));
    t.as_deref() == Some("RoCE v2") && g.is_some_and(|g| g.iter().any(|&b| b != 0))
}

/// The MAC of the net device behind GID `index` of a RoCE port.
pub fn roce_mac(port_dir: &Path, net_root: &Path, index: u32) -> Option<[u8; 6]> {
    let ndev = read_trimmed(&port_dir.join("gid_attrs/ndevs").join(index.to_string()))?;
    if ndev.is_empty() || ndev.contains('/') {
        return None;
    }
    parse_mac(&read_trimmed(&net_root.join(ndev).join("address"))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(index: u32, t: Option<&str>, gid: &str) -> GidEntry {
        GidEntry { index, gid_type: t.map(String::from), gid: parse_gid(gid).unwrap() }
    }
    const LL: &str = "fe80:0000:0000:0000:0202:c9ff:fe00:0001";
    const V4: &str = "0000:0000:0000:0000:0000:ffff:0a00:0001";
    const V6: &str = "2001:0db8:0000:0000:0000:0000:0000:0001";
    const ZERO: &str = "0000:0000:0000:0000:0000:0000:0000:0000";

    #[test]
    fn prefers_ipv4_mapped_roce_v2() {
        let t = [
            e(0, Some("IB/RoCE v1"), LL),
            e(1, Some("RoCE v2"), LL),
            e(2, Some("IB/RoCE v1"), V4),
            e(3, Some("RoCE v2"), V4),
        ];
        assert_eq!(select_roce_v2(&t), Some(3));
    }

    #[test]
    fn any_roce_v2_when_no_ipv4() {
        let t = [e(0, Some("IB/RoCE v1"), LL), e(1, Some("RoCE v2"), LL), e(3, Some("RoCE v2"), V6)];
        assert_eq!(select_roce_v2(&t), Some(1));
    }

    #[test]
    fn none_without_roce_v2_or_with_empty_entries() {
        let t = [e(0, Some("IB/RoCE v1"), LL), e(1, None, ZERO), e(2, Some("RoCE v2"), ZERO)];
        assert_eq!(select_roce_v2(&t), None);
        assert_eq!(select_roce_v2(&[]), None);
    }

    #[test]
    fn parsing() {
        assert!(is_ipv4_mapped(&parse_gid(V4).unwrap()));
        assert!(!is_ipv4_mapped(&parse_gid(LL).unwrap()));
        assert_eq!(parse_gid("fe80::1"), None);
        assert_eq!(parse_gid("zz80:0000:0000:0000:0000:0000:0000:0001"), None);
        assert_eq!(parse_mac("0c:42:a1:00:00:01\n"), Some([0x0c, 0x42, 0xa1, 0, 0, 1]));
        assert_eq!(parse_mac("0c:42:a1:00:00"), None);
    }

    /// The sysfs readers against a fake tree.
    #[test]
    fn reads_a_sysfs_tree() {
        let root = std::env::temp_dir().join(format!("mlx5-hw-gid-{}", std::process::id()));
        let port = port_dir(&root.join("ib"), "mlx5_0", 1);
        let net = root.join("net");
        for d in ["gids", "gid_attrs/types", "gid_attrs/ndevs"] {
            std::fs::create_dir_all(port.join(d)).unwrap();
        }
        std::fs::create_dir_all(net.join("eth9")).unwrap();
        let w = |p: PathBuf, s: &str| std::fs::write(p, s).unwrap();
        w(port.join("gids/0"), &format!("{LL}\n"));
        w(port.join("gids/1"), &format!("{V4}\n"));
        w(port.join("gid_attrs/types/0"), "IB/RoCE v1\n");
        w(port.join("gid_attrs/types/1"), "RoCE v2\n");
        w(port.join("gid_attrs/ndevs/1"), "eth9\n");
        w(net.join("eth9/address"), "0c:42:a1:00:00:01\n");
        let t = read_gid_table(&port, 4);
        assert_eq!(t.len(), 4);
        assert_eq!(t[2].gid_type, None);
        assert_eq!(select_roce_v2(&t), Some(1));
        assert!(still_roce_v2(&port, 1));
        assert!(!still_roce_v2(&port, 0));
        assert!(!still_roce_v2(&port, 2));
        assert_eq!(roce_mac(&port, &net, 1), Some([0x0c, 0x42, 0xa1, 0, 0, 1]));
        assert_eq!(roce_mac(&port, &net, 0), None);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
