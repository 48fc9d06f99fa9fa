//! A test-only TCP proxy in front of orbit-dev that can lose an ACK.
//!
//! It forwards bytes both ways untouched (so the WebSocket stream works
//! through it) and watches client requests for `POST /v1/deliveries/…/ack`.
//! Armed, it makes one of two faults happen to ACKs:
//!
//! * [`AckFault::DropAnswer`]: the ACK reaches Orbit, Orbit's answer is
//!   dropped and the connection cut — the consumer cannot know it succeeded.
//! * [`AckFault::Blackhole`]: every ACK is swallowed before Orbit sees it and
//!   the connection cut — as if the network died with the request.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{AbortHandle, JoinHandle};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckFault {
    /// Forward the next ACK, drop its answer, cut the connection. One-shot.
    DropAnswer = 1,
    /// Swallow every ACK and cut the connection, until disarmed.
    Blackhole = 2,
}

#[derive(Default)]
struct State {
    fault: AtomicU8,
    fired: AtomicU32,
    /// Every relayed connection, so that they can be cut.
    connections: Mutex<Vec<AbortHandle>>,
}

pub struct HttpProxy {
    addr: SocketAddr,
    state: Arc<State>,
    accept: JoinHandle<()>,
}

impl HttpProxy {
    /// A proxy for the orbit-dev at `upstream` (`http://127.0.0.1:PORT`).
    pub async fn start(upstream: &str) -> HttpProxy {
        Self::start_on(upstream, "127.0.0.1:0".parse().unwrap()).await
    }

    /// Like [`HttpProxy::start`], listening on `listen` (e.g. a port a
    /// consumer was told about before anything listened on it).
    pub async fn start_on(upstream: &str, listen: SocketAddr) -> HttpProxy {
        let upstream: SocketAddr = upstream
            .trim_start_matches("http://")
            .parse()
            .expect("orbit-dev listens on an IP:port");
        let listener = TcpListener::bind(listen).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(State::default());
        let accept = tokio::spawn({
            let state = state.clone();
            async move {
                while let Ok((client, _)) = listener.accept().await {
                    let relay_state = state.clone();
                    let connection = tokio::spawn(async move {
                        if let Ok(server) = TcpStream::connect(upstream).await {
                            relay(client, server, relay_state).await;
                        }
                    });
                    state
                        .connections
                        .lock()
                        .unwrap()
                        .push(connection.abort_handle());
                }
            }
        });
        HttpProxy {
            addr,
            state,
            accept,
        }
    }

    /// The URL to give the consumer as `ORBIT_URL`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn arm(&self, fault: AckFault) {
        self.state.fault.store(fault as u8, Ordering::SeqCst);
    }

    pub fn disarm(&self) {
        self.state.fault.store(0, Ordering::SeqCst);
    }

    /// Cuts every open connection (the WebSocket stream included), as a
    /// network failure would. New connections are accepted as before.
    pub fn cut_all(&self) {
        for connection in self.state.connections.lock().unwrap().drain(..) {
            connection.abort();
        }
    }

    /// How many ACKs a fault has hit so far.
    pub fn fired(&self) -> u32 {
        self.state.fired.load(Ordering::SeqCst)
    }
}

impl Drop for HttpProxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut_all();
    }
}

async fn relay(client: TcpStream, server: TcpStream, state: Arc<State>) {
    let (mut client_rx, mut client_tx) = client.into_split();
    let (mut server_rx, mut server_tx) = server.into_split();
    // Set when an ACK went upstream whose answer must be lost.
    let drop_answer = Arc::new(AtomicBool::new(false));

    let upstream = {
        let drop_answer = drop_answer.clone();
        let state = state.clone();
        async move {
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let n = match client_rx.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                let chunk = &buf[..n];
                if is_ack_request(chunk) {
                    match state.fault.load(Ordering::SeqCst) {
                        f if f == AckFault::Blackhole as u8 => {
                            state.fired.fetch_add(1, Ordering::SeqCst);
                            return;
                        }
                        f if f == AckFault::DropAnswer as u8 => {
                            state.fault.store(0, Ordering::SeqCst);
                            state.fired.fetch_add(1, Ordering::SeqCst);
                            drop_answer.store(true, Ordering::SeqCst);
                        }
                        _ => {}
                    }
                }
                if server_tx.write_all(chunk).await.is_err() {
                    return;
                }
            }
        }
    };
    let downstream = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match server_rx.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if drop_answer.load(Ordering::SeqCst) {
                // Orbit answered the ACK; the consumer never hears it.
                return;
            }
            if client_tx.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    };
    // Whichever side ends first ends the connection: dropping both halves
    // closes both sockets.
    tokio::select! {
        _ = upstream => {}
        _ = downstream => {}
    }
}

/// An ACK of a real delivery: `POST /v1/deliveries/<32 hex>/ack`. The
/// receiver's scope check posts to a malformed id, which is no ACK.
fn is_ack_request(chunk: &[u8]) -> bool {
    let head = &chunk[..chunk.len().min(256)];
    let text = String::from_utf8_lossy(head);
    let Some(rest) = text.strip_prefix("POST /v1/deliveries/") else {
        return false;
    };
    rest.split_once("/ack ")
        .is_some_and(|(id, _)| result_inbox::ids::is_hex_id(id))
}
