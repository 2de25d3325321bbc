//! Who is at the other end of a connection, for the caps ([`super::limits`]).
//!
//! Every local user connects from the same loopback address, so a cap per address would let one
//! user's connections refuse everyone on the machine. For a loopback connection the peer is the
//! local user who owns the client's socket: the kernel's socket table (`/proc/net/tcp`, `tcp6`)
//! lists each socket with its two ends and its owner's uid, and the client's socket is the one
//! whose ends are the server's two ends swapped. It is read as this process reads any file it
//! may, capped in bytes; a connection not found there (gone already, another namespace) and
//! every other connection count by their address.

use std::fmt;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::net::{IpAddr, SocketAddr, TcpStream};

/// Bytes of a socket table read to find one connection's owner (about 25,000 sockets).
const SOCKET_TABLE_BYTES_MAX: u64 = 4 * 1024 * 1024;

/// Whom the caps count a connection against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Peer {
    /// A local user, by the uid that owns the client's socket.
    User(u32),
    /// A client elsewhere, by its address.
    Address(IpAddr),
}

impl Peer {
    /// The peer of an accepted connection; `None` when the socket no longer has one.
    pub fn of(stream: &TcpStream) -> Option<Peer> {
        let client = canonical(stream.peer_addr().ok()?);
        let server = canonical(stream.local_addr().ok()?);
        if client.ip().is_loopback()
            && let Some(uid) = owner(client, server)
        {
            return Some(Peer::User(uid));
        }
        Some(Peer::Address(client.ip()))
    }

    /// What the caps call this peer: `user` or `address`.
    pub fn kind(&self) -> &'static str {
        match self {
            Peer::User(_) => "user",
            Peer::Address(_) => "address",
        }
    }
}

impl fmt::Display for Peer {
    /// `of user alice` (the uid without a name), `from 10.0.0.7`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Peer::User(uid) => {
                let name = crate::access::users::name_of(*uid).unwrap_or_else(|| uid.to_string());
                write!(f, "of user {}", crate::text::escape(&name))
            }
            Peer::Address(ip) => write!(f, "from {ip}"),
        }
    }
}

/// An IPv4 client of an IPv6 socket (`::ffff:127.0.0.1`) as the IPv4 address it is.
fn canonical(address: SocketAddr) -> SocketAddr {
    SocketAddr::new(address.ip().to_canonical(), address.port())
}

/// The uid owning the socket at `client` connected to `server`, from the kernel's table.
fn owner(client: SocketAddr, server: SocketAddr) -> Option<u32> {
    let table = if client.is_ipv4() { "/proc/net/tcp" } else { "/proc/net/tcp6" };
    let file = File::open(table).ok()?;
    let (client, server) = (table_address(client), table_address(server));
    BufReader::new(file.take(SOCKET_TABLE_BYTES_MAX))
        .lines()
        .skip(1)
        .map_while(Result::ok)
        .find_map(|line| owner_in_line(&line, &client, &server))
}

/// `ADDRESS:PORT` as the kernel's socket table prints it: each 32-bit word of the address in
/// the machine's byte order, in hex.
fn table_address(address: SocketAddr) -> String {
    let words: Vec<String> = match address.ip() {
        IpAddr::V4(ip) => vec![format!("{:08X}", u32::from_ne_bytes(ip.octets()))],
        IpAddr::V6(ip) => ip
            .octets()
            .chunks_exact(4)
            .map(|w| format!("{:08X}", u32::from_ne_bytes([w[0], w[1], w[2], w[3]])))
            .collect(),
    };
    format!("{}:{:04X}", words.concat(), address.port())
}

/// The uid of a table line whose local end is `local` and remote end `remote`.
fn owner_in_line(line: &str, local: &str, remote: &str) -> Option<u32> {
    let fields: Vec<&str> = line.split_whitespace().take(8).collect();
    match fields.as_slice() {
        [_, l, r, _, _, _, _, uid] if *l == local && *r == remote => uid.parse().ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn addresses_are_written_as_the_kernel_writes_them() {
        let v4: SocketAddr = "127.0.0.1:8350".parse().unwrap();
        let v6: SocketAddr = "[::1]:80".parse().unwrap();
        if cfg!(target_endian = "little") {
            assert_eq!(table_address(v4), "0100007F:209E");
            assert_eq!(table_address(v6), "00000000000000000000000001000000:0050");
        }
        let line = "   21: 0100007F:B8E4 0100007F:209E 01 00000000:00000000 00:00000000 00000000 54321        0 563008 2";
        let client = "0100007F:B8E4";
        assert_eq!(owner_in_line(line, client, "0100007F:209E"), Some(54321));
        assert_eq!(owner_in_line(line, "0100007F:209E", client), None, "the server's own end");
        assert_eq!(owner_in_line("  sl  local_address rem_address", client, client), None);
    }

    #[test]
    fn a_loopback_client_is_the_user_who_owns_its_socket() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let _client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (accepted, _) = listener.accept().unwrap();
        // SAFETY: geteuid cannot fail.
        let me = unsafe { libc::geteuid() };
        assert_eq!(Peer::of(&accepted), Some(Peer::User(me)));
        assert_eq!(Peer::Address("10.0.0.7".parse().unwrap()).to_string(), "from 10.0.0.7");
        assert_eq!(Peer::User(4_000_000_000).to_string(), "of user 4000000000");
    }
}
