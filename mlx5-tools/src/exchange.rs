//! The out-of-band exchange over TCP (perftest's "Data ex. method:
//! Ethernet"): each side sends one line per QP with what the peer needs
//! (QPN, LID, GID, MAC, PSN, buffer address and rkey), then a line `ready`
//! once its QPs are connected and receives posted.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};

use mlx5_api::{Gid, RemoteQpInfo};

use crate::engine::Remote;

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex<const N: usize>(s: &str) -> Result<Option<[u8; N]>, String> {
    if s == "-" {
        return Ok(None);
    }
    if s.len() != 2 * N {
        return Err(format!("bad field {s:?}"));
    }
    let mut out = [0u8; N];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).map_err(|e| format!("bad field {s:?}: {e}"))?;
    }
    Ok(Some(out))
}

/// One line for one QP.
pub fn encode(i: &RemoteQpInfo, r: Remote) -> String {
    format!(
        "{} {} {} {} {} {} {}\n",
        i.qpn,
        i.lid,
        i.gid.map_or("-".into(), |g| hex(&g.0)),
        i.mac.map_or("-".into(), |m| hex(&m)),
        i.psn,
        r.addr,
        r.rkey
    )
}

/// The peer's line back.
pub fn decode(line: &str) -> Result<(RemoteQpInfo, Remote), String> {
    let f: Vec<&str> = line.split_whitespace().collect();
    if f.len() != 7 {
        return Err(format!("malformed peer line {line:?}"));
    }
    let num = |s: &str| s.parse::<u64>().map_err(|e| format!("bad number {s:?}: {e}"));
    let info = RemoteQpInfo {
        qpn: num(f[0])? as u32,
        lid: num(f[1])? as u16,
        gid: unhex::<16>(f[2])?.map(Gid),
        mac: unhex::<6>(f[3])?,
        psn: num(f[4])? as u32,
    };
    Ok((info, Remote { addr: num(f[5])?, rkey: num(f[6])? as u32 }))
}

/// Connect to the server, waiting up to 5 s for it to listen (a client
/// started just before its server still finds it).
fn connect_retrying(host: &str, port: u16) -> Result<TcpStream, String> {
    let t0 = std::time::Instant::now();
    loop {
        match TcpStream::connect((host, port)) {
            Ok(s) => return Ok(s),
            Err(e)
                if e.kind() == std::io::ErrorKind::ConnectionRefused
                    && t0.elapsed() < std::time::Duration::from_secs(5) =>
            {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(e) => return Err(format!("connect to {host}:{port}: {e}")),
        }
    }
}

/// A connected control channel.
#[derive(Debug)]
pub struct Channel {
    r: BufReader<TcpStream>,
    w: TcpStream,
}

impl Channel {
    /// Server: wait for one client on `port`. Client: connect to `host`.
    pub fn open(host: Option<&str>, port: u16) -> Result<Channel, String> {
        let s = match host {
            None => {
                let l = TcpListener::bind(("0.0.0.0", port))
                    .map_err(|e| format!("listen on TCP port {port}: {e}"))?;
                eprintln!("\n************************************\n* Waiting for client to connect... *\n************************************");
                l.accept().map_err(|e| format!("accept: {e}"))?.0
            }
            Some(h) => connect_retrying(h, port)?,
        };
        let w = s.try_clone().map_err(|e| format!("tcp: {e}"))?;
        Ok(Channel { r: BufReader::new(s), w })
    }

    /// Send one line.
    pub fn send(&mut self, line: &str) -> Result<(), String> {
        self.w.write_all(line.as_bytes()).map_err(|e| format!("send to peer: {e}"))
    }

    /// Receive one line.
    pub fn recv(&mut self) -> Result<String, String> {
        let mut l = String::new();
        match self.r.read_line(&mut l) {
            Ok(0) => Err("the peer closed the connection".into()),
            Ok(_) => Ok(l),
            Err(e) => Err(format!("receive from peer: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip() {
        let i = RemoteQpInfo { qpn: 0x108, lid: 3, gid: Some(Gid([0xfe; 16])), mac: None, psn: 77 };
        let r = Remote { addr: 0x7f00_0000_1000, rkey: 0x1234 };
        let (j, s) = decode(&encode(&i, r)).unwrap();
        assert_eq!((j.qpn, j.lid, j.gid, j.mac, j.psn), (i.qpn, i.lid, i.gid, i.mac, i.psn));
        assert_eq!((s.addr, s.rkey), (r.addr, r.rkey));
        assert!(decode("1 2 3").is_err());
        assert!(decode("1 2 zz - 5 6 7").is_err());
    }
}
