//! Test-only TLS: a throwaway certificate authority made at run time (rcgen,
//! ECDSA P-256), and a TLS-terminating proxy in front of orbit-dev.
//!
//! The proxy decrypts with the CA's server certificate and relays the plain
//! bytes both ways to orbit-dev untouched, so that both the API calls
//! (`https://`) and the delivery stream (`wss://`) work through it. It counts
//! what it saw, so that a test can tell that the traffic really went through
//! TLS.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;
use tokio_rustls::TlsAcceptor;

use super::mysqld::ServerTls;
use super::{random_hex, write_private};

/// A new CA and one server certificate it signed, written as PEM files to a
/// temporary directory that is removed when dropped.
pub struct TestPki {
    dir: PathBuf,
    /// The CA's certificate (what `ORBIT_CA_FILE` and `ssl-ca` name).
    pub ca: PathBuf,
    /// The server's certificate.
    pub cert: PathBuf,
    /// The server's private key (PKCS#8).
    pub key: PathBuf,
    cert_der: CertificateDer<'static>,
    key_der: Vec<u8>,
}

impl TestPki {
    /// A CA and a server certificate for `127.0.0.1` and `localhost`.
    pub fn loopback() -> TestPki {
        Self::for_names(&["127.0.0.1", "localhost"])
    }

    /// A CA and a server certificate whose subject alternative names are
    /// `names` (IP addresses become IP SANs).
    pub fn for_names(names: &[&str]) -> TestPki {
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.distinguished_name.push(
            DnType::CommonName,
            format!("result-inbox test CA {}", random_hex(4)),
        );
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca_params.self_signed(&ca_key).unwrap();

        let key = KeyPair::generate().unwrap();
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names.clone()).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, &names[0]);
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let cert = params.signed_by(&key, &ca_cert, &ca_key).unwrap();

        let dir = std::env::temp_dir().join(format!("result-inbox-pki-{}", random_hex(8)));
        std::fs::create_dir_all(&dir).unwrap();
        let pki = TestPki {
            ca: dir.join("ca.pem"),
            cert: dir.join("server.pem"),
            key: dir.join("server-key.pem"),
            dir,
            cert_der: cert.der().clone(),
            key_der: key.serialize_der(),
        };
        std::fs::write(&pki.ca, ca_cert.pem()).unwrap();
        std::fs::write(&pki.cert, cert.pem()).unwrap();
        write_private(&pki.key, key.serialize_pem().as_bytes());
        pki
    }

    /// The files for [`super::mysqld::PrivateServer::start_with_tls`].
    pub fn server_files(&self) -> ServerTls {
        ServerTls {
            ca: self.ca.clone(),
            cert: self.cert.clone(),
            key: self.key.clone(),
        }
    }

    /// A rustls server configuration presenting the server certificate.
    pub fn server_config(&self) -> Arc<rustls::ServerConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key_der.clone()));
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![self.cert_der.clone()], key)
            .unwrap();
        Arc::new(config)
    }

    /// A file in this PKI's directory (removed with it).
    pub fn file(&self, name: &str, content: &[u8]) -> PathBuf {
        let path = self.dir.join(name);
        std::fs::write(&path, content).unwrap();
        path
    }
}

impl Drop for TestPki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[derive(Default)]
struct Counters {
    /// TLS handshakes that completed.
    handshakes: AtomicU32,
    /// TLS handshakes that failed (e.g. the client refused the certificate).
    failed_handshakes: AtomicU32,
    /// Decrypted connections whose first request asked for a WebSocket.
    websocket_upgrades: AtomicU32,
    /// Every relayed connection, so that they can be cut on drop.
    connections: Mutex<Vec<AbortHandle>>,
}

/// A TLS-terminating proxy on a free loopback port; stops when dropped.
///
/// It runs on a runtime of its own, so that it keeps serving while the test
/// waits for a `receiver` process synchronously.
pub struct TlsProxy {
    addr: SocketAddr,
    counters: Arc<Counters>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl TlsProxy {
    /// A proxy for the orbit-dev at `upstream` (`http://127.0.0.1:PORT`)
    /// presenting `pki`'s server certificate.
    pub fn start(upstream: &str, pki: &TestPki) -> TlsProxy {
        let upstream: SocketAddr = upstream
            .trim_start_matches("http://")
            .parse()
            .expect("orbit-dev listens on an IP:port");
        let acceptor = TlsAcceptor::from(pki.server_config());
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let counters = Arc::new(Counters::default());
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        runtime.spawn({
            let counters = counters.clone();
            async move {
                let listener = TcpListener::from_std(listener).unwrap();
                while let Ok((client, _)) = listener.accept().await {
                    let acceptor = acceptor.clone();
                    let relay_counters = counters.clone();
                    let connection = tokio::spawn(async move {
                        relay(acceptor, client, upstream, relay_counters).await;
                    });
                    counters
                        .connections
                        .lock()
                        .unwrap()
                        .push(connection.abort_handle());
                }
            }
        });
        TlsProxy {
            addr,
            counters,
            runtime: Some(runtime),
        }
    }

    /// `https://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    pub fn handshakes(&self) -> u32 {
        self.counters.handshakes.load(Ordering::SeqCst)
    }

    pub fn failed_handshakes(&self) -> u32 {
        self.counters.failed_handshakes.load(Ordering::SeqCst)
    }

    pub fn websocket_upgrades(&self) -> u32 {
        self.counters.websocket_upgrades.load(Ordering::SeqCst)
    }
}

impl Drop for TlsProxy {
    fn drop(&mut self) {
        for connection in self.counters.connections.lock().unwrap().drain(..) {
            connection.abort();
        }
        // Allowed inside an async test, unlike dropping the runtime.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

async fn relay(acceptor: TlsAcceptor, client: TcpStream, upstream: SocketAddr, c: Arc<Counters>) {
    let mut tls = match acceptor.accept(client).await {
        Ok(tls) => tls,
        Err(_) => {
            c.failed_handshakes.fetch_add(1, Ordering::SeqCst);
            return;
        }
    };
    c.handshakes.fetch_add(1, Ordering::SeqCst);
    // The first request's head, to see whether it opens a WebSocket. Clients
    // write a request head at once, so one read holds it.
    let mut head = vec![0u8; 16 * 1024];
    let n = match tls.read(&mut head).await {
        Ok(0) | Err(_) => return,
        Ok(n) => n,
    };
    head.truncate(n);
    if String::from_utf8_lossy(&head)
        .to_ascii_lowercase()
        .contains("upgrade: websocket")
    {
        c.websocket_upgrades.fetch_add(1, Ordering::SeqCst);
    }
    let Ok(mut server) = TcpStream::connect(upstream).await else {
        return;
    };
    if server.write_all(&head).await.is_err() {
        return;
    }
    let _ = tokio::io::copy_bidirectional(&mut tls, &mut server).await;
}
