//! A test-only database proxy that can lose a COMMIT or its answer, for
//! MySQL's protocol and for PostgreSQL's.
//!
//! It listens on 127.0.0.1:0 in front of a throwaway server and relays whole
//! messages both ways, not raw chunks, so that it can recognise one command:
//! a COMMIT. sqlx 0.8 sends a query without arguments over each protocol's
//! simple path, never prepared: on MySQL a `COM_QUERY` (0x03) with the text
//! `COMMIT`, on PostgreSQL a simple `Query` (`Q`). A prepared `COMMIT`
//! (`COM_STMT_PREPARE`, 0x16; PostgreSQL's `Parse`, `P`) is recognised as
//! well, so that a client that prepared it could not slip past the fault.
//!
//! Armed with a [`Fault`], the proxy spoils the next COMMIT of any connection
//! and disarms itself; armed with [`CommitProxy::arm_every`], it spoils every
//! COMMIT until [`CommitProxy::disarm`]. Only plain TCP works: the proxy hides TLS from
//! clients (MySQL: the greeting's capability; PostgreSQL: it answers an
//! `SSLRequest` with `N` itself), and sqlx does not compress.
#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use result_inbox::db::Dsn;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

/// What happens to the next COMMIT. Both cut the client's connection, so the
/// client cannot know whether its transaction committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The COMMIT reaches the server, which commits and answers OK; the
    /// answer is dropped and both connections are closed.
    DropCommitOk,
    /// The COMMIT never reaches the server; both connections are closed, and
    /// the server rolls the open transaction back when it notices.
    DropCommitBeforeServer,
    /// The COMMIT never reaches the server, and the client is left waiting
    /// for its answer: the proxy holds both connections until the client
    /// closes its own (a process killed), then closes the server's, which
    /// rolls the open transaction back.
    HoldCommit,
}

/// The protocol the proxy reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wire {
    MySql,
    Postgres,
}

#[derive(Default)]
struct Shared {
    armed: Mutex<Option<Fault>>,
    /// Whether the armed fault stays armed after it fired.
    every: AtomicBool,
    fired: AtomicU32,
}

impl Shared {
    /// The fault the COMMIT at hand meets, if any.
    fn take(&self) -> Option<Fault> {
        let mut armed = self.armed.lock().unwrap();
        match self.every.load(Ordering::SeqCst) {
            true => *armed,
            false => armed.take(),
        }
    }
}

/// The proxy; it stops (and cuts every relayed connection) when dropped.
pub struct CommitProxy {
    port: u16,
    /// The administrator's DSN of the server behind the proxy.
    admin: String,
    shared: Arc<Shared>,
    accept: JoinHandle<()>,
}

impl CommitProxy {
    /// A proxy in front of the MySQL server of `RESULT_INBOX_TEST_ADMIN_DSN`.
    pub async fn mysql() -> CommitProxy {
        Self::start(Wire::MySql, super::admin_dsn()).await
    }

    /// A proxy in front of the PostgreSQL server of
    /// `RESULT_INBOX_TEST_PG_ADMIN_DSN`.
    pub async fn postgres() -> CommitProxy {
        Self::start(Wire::Postgres, super::postgres::admin_dsn()).await
    }

    async fn start(wire: Wire, admin: String) -> CommitProxy {
        let (_, authority, _) = split_url(&admin);
        let upstream = authority
            .rsplit_once('@')
            .map_or(authority, |(_, host)| host)
            .to_owned();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(Shared::default());
        let accept = tokio::spawn({
            let shared = shared.clone();
            async move {
                // Owned by this task: aborting it drops the set, and dropping
                // a JoinSet aborts every relay in it.
                let mut relays = JoinSet::new();
                while let Ok((client, _)) = listener.accept().await {
                    while relays.try_join_next().is_some() {}
                    relays.spawn(relay(wire, client, upstream.clone(), shared.clone()));
                }
            }
        });
        CommitProxy {
            port,
            admin,
            shared,
            accept,
        }
    }

    /// The loopback port the proxy listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The admin DSN's user through the proxy, naming `database`.
    pub fn dsn_for(&self, database: &str) -> Dsn {
        Dsn::parse(&self.url_for(database)).unwrap()
    }

    /// [`dsn_for`](Self::dsn_for) as text, for a process's environment.
    pub fn url_for(&self, database: &str) -> String {
        let (scheme, authority, _) = split_url(&self.admin);
        let user = authority
            .rsplit_once('@')
            .map(|(user, _)| format!("{user}@"))
            .unwrap_or_default();
        format!("{scheme}://{user}127.0.0.1:{}/{database}", self.port)
    }

    /// Spoils the next COMMIT, of whichever connection sends it, with `fault`.
    pub fn arm(&self, fault: Fault) {
        self.shared.every.store(false, Ordering::SeqCst);
        *self.shared.armed.lock().unwrap() = Some(fault);
    }

    /// Spoils every COMMIT, of every connection, with `fault` until
    /// [`disarm`](Self::disarm)ed.
    pub fn arm_every(&self, fault: Fault) {
        self.shared.every.store(true, Ordering::SeqCst);
        *self.shared.armed.lock().unwrap() = Some(fault);
    }

    /// Lets every COMMIT through again.
    pub fn disarm(&self) {
        *self.shared.armed.lock().unwrap() = None;
        self.shared.every.store(false, Ordering::SeqCst);
    }

    /// How many faults have been carried out. `DropCommitOk` counts once the
    /// server's answer has been read and dropped; `HoldCommit` once the
    /// COMMIT is held.
    pub fn fired(&self) -> u32 {
        self.shared.fired.load(Ordering::SeqCst)
    }
}

impl Drop for CommitProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// A URL's scheme, authority and the rest.
fn split_url(url: &str) -> (&str, &str, &str) {
    let (scheme, rest) = url.split_once("://").expect("the admin DSN is a URL");
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    (scheme, authority, path)
}

/// Relays one client connection until either side closes or a fault fires.
async fn relay(wire: Wire, mut client: TcpStream, upstream: String, shared: Arc<Shared>) {
    let Ok(mut server) = TcpStream::connect(&upstream).await else {
        return;
    };
    if wire.open(&mut client, &mut server).await.is_none() {
        return;
    }
    let (mut client_rx, mut client_tx) = client.into_split();
    let (mut server_rx, mut server_tx) = server.into_split();
    // Set before a doomed COMMIT is forwarded, so it is already set when the
    // server's answer to it arrives: the server only answers what it got.
    let swallow_answer = AtomicBool::new(false);

    let to_server = async {
        while let Some(message) = wire.read(&mut client_rx).await {
            if wire.is_commit(&message) {
                // Taking the fault disarms the proxy (one COMMIT, one
                // fault) unless it was armed for every COMMIT.
                match shared.take() {
                    Some(Fault::DropCommitBeforeServer) => {
                        shared.fired.fetch_add(1, Ordering::SeqCst);
                        return;
                    }
                    Some(Fault::HoldCommit) => {
                        shared.fired.fetch_add(1, Ordering::SeqCst);
                        // The client sends nothing while it waits for the
                        // answer; its end of stream is its connection closed.
                        while wire.read(&mut client_rx).await.is_some() {}
                        return;
                    }
                    Some(Fault::DropCommitOk) => swallow_answer.store(true, Ordering::SeqCst),
                    None => {}
                }
            }
            if server_tx.write_all(&message).await.is_err() {
                return;
            }
        }
    };
    let to_client = async {
        while let Some(message) = wire.read(&mut server_rx).await {
            if swallow_answer.load(Ordering::SeqCst) {
                // The answer to the COMMIT has been read; it is lost.
                shared.fired.fetch_add(1, Ordering::SeqCst);
                return;
            }
            if client_tx.write_all(&message).await.is_err() {
                return;
            }
        }
    };
    // Whichever direction ends first ends the connection: the other one is
    // dropped here, and with it every half of both sockets, which closes them.
    tokio::select! {
        () = to_server => {}
        () = to_client => {}
    }
}

impl Wire {
    /// The connection's opening, up to where every message is framed the
    /// same way both ways; TLS is refused on the way. `None` when a side
    /// closed.
    async fn open(self, client: &mut TcpStream, server: &mut TcpStream) -> Option<()> {
        match self {
            Wire::MySql => {
                let mut greeting = read_packet(server).await?;
                hide_tls(&mut greeting);
                client.write_all(&greeting).await.ok()
            }
            Wire::Postgres => loop {
                // Untyped until the startup message: a length that counts
                // itself, then a request code or the protocol version.
                let mut len = [0u8; 4];
                client.read_exact(&mut len).await.ok()?;
                let mut message = len.to_vec();
                message.resize(u32::from_be_bytes(len).max(8) as usize, 0);
                client.read_exact(&mut message[4..]).await.ok()?;
                let code = u32::from_be_bytes([message[4], message[5], message[6], message[7]]);
                if code == SSL_REQUEST || code == GSSENC_REQUEST {
                    client.write_all(b"N").await.ok()?;
                    continue;
                }
                return server.write_all(&message).await.ok();
            },
        }
    }

    /// One whole message, header included; `None` at end of stream or on
    /// error.
    async fn read(self, from: &mut (impl AsyncRead + Unpin)) -> Option<Vec<u8>> {
        match self {
            Wire::MySql => read_packet(from).await,
            Wire::Postgres => {
                // A type byte, then a length that counts itself.
                let mut message = vec![0u8; 5];
                from.read_exact(&mut message).await.ok()?;
                let len = u32::from_be_bytes([message[1], message[2], message[3], message[4]]);
                message.resize(1 + (len as usize).max(4), 0);
                from.read_exact(&mut message[5..]).await.ok()?;
                Some(message)
            }
        }
    }

    /// A COMMIT command.
    fn is_commit(self, message: &[u8]) -> bool {
        let text = match self {
            // Commands open an exchange, so their sequence byte is 0; the
            // handshake response and authentication packets never are.
            Wire::MySql => match message[4..].split_first() {
                Some((&(COM_QUERY | COM_STMT_PREPARE), text)) if message[3] == 0 => text,
                _ => return false,
            },
            // A query is NUL-terminated; a Parse names its statement first.
            Wire::Postgres => match message.split_first() {
                Some((b'Q', body)) => body[4..].split(|&b| b == 0).next().unwrap_or_default(),
                Some((b'P', body)) => body[4..].split(|&b| b == 0).nth(1).unwrap_or_default(),
                _ => return false,
            },
        };
        std::str::from_utf8(text).is_ok_and(|t| t.trim().eq_ignore_ascii_case("COMMIT"))
    }
}

const COM_QUERY: u8 = 0x03;
const COM_STMT_PREPARE: u8 = 0x16;
/// `CLIENT_SSL`, bit 11 of MySQL's capability flags.
const CLIENT_SSL: u16 = 0x0800;
/// PostgreSQL's request codes for TLS and for GSSAPI encryption.
const SSL_REQUEST: u32 = 80_877_103;
const GSSENC_REQUEST: u32 = 80_877_104;

/// One whole MySQL packet: 3-byte little-endian payload length, one
/// sequence byte, payload (the handshake is framed the same way).
async fn read_packet(from: &mut (impl AsyncRead + Unpin)) -> Option<Vec<u8>> {
    let mut packet = vec![0u8; 4];
    from.read_exact(&mut packet).await.ok()?;
    let len = u32::from_le_bytes([packet[0], packet[1], packet[2], 0]) as usize;
    packet.resize(4 + len, 0);
    from.read_exact(&mut packet[4..]).await.ok()?;
    Some(packet)
}

/// Clears `CLIENT_SSL` in the server's greeting, so that no client switches
/// to TLS and every packet stays readable. The greeting (protocol 10) is:
/// version byte, NUL-terminated server version, 4-byte connection id, 8 bytes
/// of scramble, a filler byte, then the low 16 capability bits.
fn hide_tls(greeting: &mut [u8]) {
    let payload = &mut greeting[4..];
    if payload.first() != Some(&10) {
        return; // Not a greeting (e.g. "too many connections"): leave it be.
    }
    let Some(nul) = payload[1..].iter().position(|&b| b == 0) else {
        return;
    };
    let at = 1 + nul + 1 + 4 + 8 + 1;
    if let Some(flags) = payload.get_mut(at..at + 2) {
        let bits = u16::from_le_bytes([flags[0], flags[1]]) & !CLIENT_SSL;
        flags.copy_from_slice(&bits.to_le_bytes());
    }
}
