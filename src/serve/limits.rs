//! What one client may cost the dashboard, and the count of open connections that enforces it.
//!
//! A fixed pool of [`WORKERS`] answers requests; a connection holds one for at most
//! [`REQUEST_HEAD_TIMEOUT`] while its request arrives and [`RESPONSE_WRITE_TIMEOUT`] while its
//! answer leaves, then is closed (one request per connection: pipelining costs nothing). At most
//! [`CONNECTIONS_MAX`] connections are open in all and [`CONNECTIONS_PER_PEER_MAX`] from one
//! peer (a local user, or a remote address: [`Peer`]), fewer than the workers, so other peers
//! are still served while one holds all of its own. Past a cap the connection gets a 503 with
//! `Retry-After` ([`Refusal`]). Pages are bounded too ([`PAGE_BYTES_MAX`],
//! [`TEXT_SHOWN_BYTES_MAX`], [`ROWS_SHOWN_MAX`]).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use super::peer::Peer;

/// Threads that read requests and write answers.
pub const WORKERS: usize = 8;
/// Connections open at once from one peer (being read, answered or waiting for a worker).
pub const CONNECTIONS_PER_PEER_MAX: usize = 6;
/// Connections open at once in all; those past the workers wait in the accept queue.
pub const CONNECTIONS_MAX: usize = 64;
/// Bytes of a request's line and headers; a GET has no body.
pub const REQUEST_HEAD_BYTES_MAX: usize = 8 * 1024;
/// Time for a request's line and headers to arrive, from the connection's start.
pub const REQUEST_HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// Time for an answer to leave, from its first byte.
pub const RESPONSE_WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Seconds a refused client is asked to wait (`Retry-After`).
pub const RETRY_AFTER_S: u32 = 5;
/// Bytes of one page; a longer body is cut at a line and says so.
pub const PAGE_BYTES_MAX: usize = 1024 * 1024;
/// Bytes of one piece of user text on a page (a command, a name, a reason) before the cut.
pub const TEXT_SHOWN_BYTES_MAX: usize = 16 * 1024;
/// Rows of one table on a page (tasks waiting or running, one task's attempts).
pub const ROWS_SHOWN_MAX: usize = 500;

const _: () = assert!(CONNECTIONS_PER_PEER_MAX < WORKERS, "one peer never holds every worker");
const _: () = assert!(WORKERS <= CONNECTIONS_MAX);
const _: () = assert!(TEXT_SHOWN_BYTES_MAX * 8 < PAGE_BYTES_MAX);

/// The open connections, per peer.
#[derive(Debug, Default)]
pub struct Peers {
    open: Mutex<HashMap<Peer, usize>>,
}

/// One admitted connection; its count is given back when it is dropped.
#[derive(Debug)]
pub struct Ticket<'a> {
    peers: &'a Peers,
    peer: Peer,
}

/// Why a connection was refused; its message is the 503's body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The peer already holds [`CONNECTIONS_PER_PEER_MAX`].
    Peer(Peer),
    /// [`CONNECTIONS_MAX`] are open.
    Total,
}

impl Peers {
    /// Counts a new connection from `peer`, or says which cap it would pass.
    pub fn admit(&self, peer: Peer) -> Result<Ticket<'_>, Refusal> {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let total: usize = open.values().sum();
        let mine = open.get(&peer).copied().unwrap_or(0);
        if mine >= CONNECTIONS_PER_PEER_MAX {
            return Err(Refusal::Peer(peer));
        }
        if total >= CONNECTIONS_MAX {
            return Err(Refusal::Total);
        }
        open.insert(peer, mine + 1);
        Ok(Ticket { peers: self, peer })
    }

    /// Connections open now, in all.
    pub fn total(&self) -> usize {
        self.open.lock().unwrap_or_else(PoisonError::into_inner).values().sum()
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        let mut open = self.peers.open.lock().unwrap_or_else(PoisonError::into_inner);
        match open.get_mut(&self.peer) {
            Some(1) => {
                open.remove(&self.peer);
            }
            Some(n) => *n -= 1,
            None => unreachable!("a ticket is counted until it is dropped"),
        }
    }
}

impl Refusal {
    /// The 503's body: which cap, and what to do.
    pub fn message(&self) -> String {
        match self {
            Refusal::Peer(peer) => format!(
                "carma serve: {CONNECTIONS_PER_PEER_MAX} connections {peer} are open, the most one {} may hold; retry in a few seconds\n",
                peer.kind()
            ),
            Refusal::Total => format!(
                "carma serve: {CONNECTIONS_MAX} connections are open, the most it serves at once; retry in a few seconds\n"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_peer_is_capped_below_the_workers_and_others_still_get_in() {
        let peers = Peers::default();
        // Uids no account has, so the message names the uid on any machine.
        let hostile = Peer::User(4_000_000_001);
        let held: Vec<Ticket> =
            (0..CONNECTIONS_PER_PEER_MAX).map(|_| peers.admit(hostile).unwrap()).collect();
        assert_eq!(peers.admit(hostile).unwrap_err(), Refusal::Peer(hostile));
        assert_eq!(
            Refusal::Peer(hostile).message(),
            "carma serve: 6 connections of user 4000000001 are open, the most one user may hold; retry in a few seconds\n"
        );
        let other = peers.admit(Peer::User(4_000_000_002)).expect("another user is admitted");
        assert_eq!(peers.total(), CONNECTIONS_PER_PEER_MAX + 1);
        drop(held);
        drop(other);
        assert_eq!(peers.total(), 0, "every ticket gave its count back");
        assert!(peers.admit(hostile).is_ok());
    }

    #[test]
    fn the_total_cap_holds_across_addresses() {
        let peers = Peers::default();
        let mut held = Vec::new();
        for n in 0..CONNECTIONS_MAX {
            let peer = Peer::Address([10, 0, (n / 250) as u8, (n % 250) as u8].into());
            held.push(peers.admit(peer).unwrap());
        }
        assert_eq!(peers.admit(Peer::Address([10, 9, 9, 9].into())).unwrap_err(), Refusal::Total);
        assert_eq!(
            Refusal::Total.message(),
            "carma serve: 64 connections are open, the most it serves at once; retry in a few seconds\n"
        );
    }
}
