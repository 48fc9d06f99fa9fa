//! A test-only MySQL-protocol proxy that can lose a COMMIT or its answer.
//!
//! It listens on 127.0.0.1:0 in front of the throwaway server and relays the
//! protocol's packets both ways: 3-byte little-endian payload length, one
//! sequence byte, payload (the handshake is framed the same way). It reads
//! whole packets, not raw chunks, so that it can recognise one command: a
//! COMMIT. sqlx 0.8 sends it as a plain `COM_QUERY` (0x03) with the text
//! `COMMIT` — a query without arguments goes over the text protocol, never
//! prepared. A `COM_STMT_PREPARE` (0x16) of `COMMIT` is recognised as well,
//! so that a client that prepared it could not slip past the fault.
//!
//! Armed with a [`Fault`], the proxy spoils the next COMMIT of any connection
//! and disarms itself. Only plain TCP works: the proxy hides the server's TLS
//! capability from clients, and sqlx does not compress.
#![allow(dead_code)]

use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use result_inbox::db::Dsn;
use sqlx::mysql::MySqlConnectOptions;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

use super::admin_dsn;

const COM_QUERY: u8 = 0x03;
const COM_STMT_PREPARE: u8 = 0x16;
/// `CLIENT_SSL`, bit 11 of the capability flags.
const CLIENT_SSL: u16 = 0x0800;

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
}

#[derive(Default)]
struct Shared {
    armed: Mutex<Option<Fault>>,
    fired: AtomicU32,
}

/// The proxy; it stops (and cuts every relayed connection) when dropped.
pub struct MySqlProxy {
    port: u16,
    shared: Arc<Shared>,
    accept: JoinHandle<()>,
}

impl MySqlProxy {
    /// A proxy in front of the server of `RESULT_INBOX_TEST_ADMIN_DSN`.
    pub async fn start() -> MySqlProxy {
        let admin = MySqlConnectOptions::from_str(&admin_dsn()).expect("admin DSN");
        let upstream = format!("{}:{}", admin.get_host(), admin.get_port());
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
                    relays.spawn(relay(client, upstream.clone(), shared.clone()));
                }
            }
        });
        MySqlProxy {
            port,
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
        let admin = admin_dsn();
        let (scheme, rest) = admin.split_once("://").expect("the admin DSN is a URL");
        let authority = rest.split('/').next().unwrap_or(rest);
        let user = authority
            .rsplit_once('@')
            .map(|(user, _)| format!("{user}@"))
            .unwrap_or_default();
        Dsn::parse(&format!(
            "{scheme}://{user}127.0.0.1:{}/{database}",
            self.port
        ))
        .unwrap()
    }

    /// Spoils the next COMMIT, of whichever connection sends it, with `fault`.
    pub fn arm(&self, fault: Fault) {
        *self.shared.armed.lock().unwrap() = Some(fault);
    }

    /// How many faults have been carried out. `DropCommitOk` counts once the
    /// server's answer has been read and dropped.
    pub fn fired(&self) -> u32 {
        self.shared.fired.load(Ordering::SeqCst)
    }
}

impl Drop for MySqlProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Relays one client connection until either side closes or a fault fires.
async fn relay(client: TcpStream, upstream: String, shared: Arc<Shared>) {
    let Ok(server) = TcpStream::connect(&upstream).await else {
        return;
    };
    let (mut client_rx, mut client_tx) = client.into_split();
    let (mut server_rx, mut server_tx) = server.into_split();
    // Set before a doomed COMMIT is forwarded, so it is already set when the
    // server's answer to it arrives: the server only answers what it got.
    let swallow_answer = AtomicBool::new(false);

    let to_server = async {
        while let Some(packet) = read_packet(&mut client_rx).await {
            if is_commit(&packet) {
                // Taking the fault disarms the proxy: one COMMIT, one fault.
                let fault = shared.armed.lock().unwrap().take();
                match fault {
                    Some(Fault::DropCommitBeforeServer) => {
                        shared.fired.fetch_add(1, Ordering::SeqCst);
                        return;
                    }
                    Some(Fault::DropCommitOk) => swallow_answer.store(true, Ordering::SeqCst),
                    None => {}
                }
            }
            if server_tx.write_all(&packet).await.is_err() {
                return;
            }
        }
    };
    let to_client = async {
        let mut first = true;
        while let Some(mut packet) = read_packet(&mut server_rx).await {
            if std::mem::take(&mut first) {
                hide_tls(&mut packet);
            }
            if swallow_answer.load(Ordering::SeqCst) {
                // The whole answer to the COMMIT has been read; it is lost.
                shared.fired.fetch_add(1, Ordering::SeqCst);
                return;
            }
            if client_tx.write_all(&packet).await.is_err() {
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

/// One whole packet, header included; `None` at end of stream or on error.
async fn read_packet(from: &mut (impl AsyncRead + Unpin)) -> Option<Vec<u8>> {
    let mut packet = vec![0u8; 4];
    from.read_exact(&mut packet).await.ok()?;
    let len = u32::from_le_bytes([packet[0], packet[1], packet[2], 0]) as usize;
    packet.resize(4 + len, 0);
    from.read_exact(&mut packet[4..]).await.ok()?;
    Some(packet)
}

/// A COMMIT command. Commands open an exchange, so their sequence byte is 0;
/// the handshake response and authentication packets never are.
fn is_commit(packet: &[u8]) -> bool {
    match packet[4..].split_first() {
        Some((&(COM_QUERY | COM_STMT_PREPARE), text)) if packet[3] == 0 => {
            std::str::from_utf8(text).is_ok_and(|t| t.trim().eq_ignore_ascii_case("COMMIT"))
        }
        _ => false,
    }
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
