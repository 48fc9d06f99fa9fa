//! A throwaway `nats-server` with JetStream, a stream and a durable pull
//! consumer for one queue, and a proxy that can lose the answer to an
//! acknowledgement.
//!
//! Every server listens on a port of its own choosing (`-p -1`) on loopback
//! and keeps JetStream's files in a temporary directory removed with it: the
//! tests never touch a NATS server that happens to run on 4222.
#![allow(dead_code)]

use std::ffi::{OsStr, OsString};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::{self, consumer, stream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use super::{random_hex, write_private};

/// Pulls up to `n` messages from `consumer`, waiting at most `wait` for
/// them; none is acknowledged.
pub async fn pull(
    consumer: &consumer::PullConsumer,
    n: usize,
    wait: Duration,
) -> Vec<jetstream::Message> {
    use futures::StreamExt;
    let mut batch = consumer
        .batch()
        .max_messages(n)
        .expires(wait)
        .messages()
        .await
        .unwrap();
    let mut messages = Vec::new();
    while let Some(message) = batch.next().await {
        messages.push(message.unwrap());
    }
    messages
}

/// A nats-server process; killed and its directory removed when dropped.
pub struct NatsServer {
    child: Child,
    pub port: u16,
    /// What it was started with, on its port: what a restart runs again.
    args: Vec<OsString>,
    pub dir: PathBuf,
    /// How the test's own client logs in and which CA it trusts.
    token: Option<String>,
    user_password: Option<(String, String)>,
    creds_file: Option<PathBuf>,
    ca: Option<PathBuf>,
    scheme: &'static str,
}

/// How a test server is set up beyond JetStream.
#[derive(Default)]
pub struct NatsServerOptions<'a> {
    /// Clients must log in with this token (`--auth`).
    pub token: Option<&'a str>,
    /// Clients must log in with this user and password (`--user`, `--pass`).
    pub user_password: Option<(&'a str, &'a str)>,
    /// The server speaks TLS only, with this certificate and key; clients
    /// trust this CA.
    pub tls: Option<&'a super::tls::TestPki>,
    /// The server trusts this operator's JWTs only (operator mode): clients
    /// must log in as its user, with the credentials file the server writes
    /// into its directory ([`NatsServer::creds_file`]).
    pub operator: Option<&'a TestOperator>,
    /// The server is a node of a JetStream cluster.
    pub cluster: Option<ClusterNode<'a>>,
}

/// Where a node of a cluster takes its routes, and where the others take
/// theirs.
pub struct ClusterNode<'a> {
    /// The server's name: what JetStream calls the node (a stream's
    /// leader, its replicas).
    pub name: &'a str,
    /// The cluster's name.
    pub cluster: &'a str,
    /// The loopback port this node takes routes on.
    pub port: u16,
    /// The other nodes' route ports.
    pub routes: &'a [u16],
}

impl NatsServer {
    /// Starts `nats-server -js` on a free loopback port.
    pub fn start() -> NatsServer {
        NatsServer::start_with(NatsServerOptions::default())
    }

    /// Starts `nats-server -js` on a free loopback port, with a token or
    /// TLS.
    pub fn start_with(options: NatsServerOptions<'_>) -> NatsServer {
        let dir = std::env::temp_dir().join(format!("result-inbox-nats-{}", random_hex(8)));
        std::fs::create_dir_all(&dir).unwrap();
        let mut command = Command::new("nats-server");
        command
            .args(["-a", "127.0.0.1", "-p", "-1", "-js", "-sd"])
            .arg(dir.join("jetstream"));
        let mut creds_file = None;
        if let Some(operator) = options.operator {
            // Operator mode has no command-line flags: the trusted operator
            // and the accounts come from a configuration file.
            let config = dir.join("operator.conf");
            std::fs::write(&config, operator.server_config()).unwrap();
            command.arg("-c").arg(config);
            let creds = dir.join("user.creds");
            write_private(&creds, operator.creds().as_bytes());
            creds_file = Some(creds);
        }
        if let Some(token) = options.token {
            command.args(["--auth", token]);
        }
        if let Some(node) = &options.cluster {
            let routes: Vec<String> = node
                .routes
                .iter()
                .map(|port| format!("nats://127.0.0.1:{port}"))
                .collect();
            command
                .args(["--name", node.name, "--cluster_name", node.cluster])
                .arg("--cluster")
                .arg(format!("nats://127.0.0.1:{}", node.port))
                .arg("--routes")
                .arg(routes.join(","));
        }
        if let Some((user, password)) = options.user_password {
            command.args(["--user", user, "--pass", password]);
        }
        let mut scheme = "nats";
        if let Some(pki) = options.tls {
            command
                .arg("--tls")
                .arg("--tlscert")
                .arg(&pki.cert)
                .arg("--tlskey")
                .arg(&pki.key);
            scheme = "tls";
        }
        let mut args: Vec<OsString> = command.get_args().map(OsStr::to_owned).collect();
        let (child, port) = spawn(&args);
        // A restart listens where this one does, on the same files.
        let p = args.iter().position(|a| a == "-p").unwrap();
        args[p + 1] = port.to_string().into();
        NatsServer {
            child,
            port,
            args,
            dir,
            token: options.token.map(str::to_owned),
            user_password: options
                .user_password
                .map(|(u, p)| (u.to_owned(), p.to_owned())),
            creds_file,
            ca: options.tls.map(|pki| pki.ca.clone()),
            scheme,
        }
    }

    pub fn url(&self) -> String {
        format!("{}://127.0.0.1:{}", self.scheme, self.port)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills the server at once (SIGKILL), as a crashed machine would stop.
    pub fn kill(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// Starts the killed server again, on the same port and JetStream
    /// files: its streams and their messages are back.
    pub fn restart(&mut self) {
        let (child, _) = spawn(&self.args);
        self.child = child;
    }

    /// The operator's user's credentials file (mode 0600), on a server in
    /// operator mode.
    pub fn creds_file(&self) -> Option<&Path> {
        self.creds_file.as_deref()
    }

    /// The test's own client, logged in as the server requires.
    pub async fn client(&self) -> async_nats::Client {
        let mut options = match (&self.token, &self.user_password, &self.creds_file) {
            (Some(token), _, _) => async_nats::ConnectOptions::with_token(token.clone()),
            (None, Some((user, password)), _) => {
                async_nats::ConnectOptions::with_user_and_password(user.clone(), password.clone())
            }
            (None, None, Some(creds)) => async_nats::ConnectOptions::with_credentials_file(creds)
                .await
                .unwrap(),
            (None, None, None) => async_nats::ConnectOptions::new(),
        };
        if let Some(ca) = &self.ca {
            options = options.require_tls(true).add_root_certificates(ca.clone());
        }
        options.connect(self.url()).await.unwrap()
    }

    pub async fn jetstream(&self) -> jetstream::Context {
        jetstream::new(self.client().await)
    }
}

/// Runs `nats-server` with `args` and waits until it listens for clients:
/// the process and its port.
fn spawn(args: &[OsString]) -> (Child, u16) {
    let mut child = Command::new("nats-server")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot run nats-server ({e}): `make test` installs it (Debian package nats-server)")
        });
    let stderr = child.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    let port = loop {
        let line = lines
            .next()
            .expect("nats-server exited before listening")
            .unwrap();
        if let Some(addr) = line.split("Listening for client connections on ").nth(1) {
            break addr.trim().rsplit(':').next().unwrap().parse().unwrap();
        }
    };
    // Keep draining its log so that it never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    (child, port)
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Three nats-servers with JetStream in one cluster, on loopback ports of
/// their own, each keeping its files in its own directory.
pub struct NatsCluster {
    /// The nodes, named `n1`, `n2` and `n3`.
    pub nodes: Vec<NatsServer>,
    names: Vec<String>,
}

impl NatsCluster {
    /// Starts the three nodes and waits until JetStream can place a stream
    /// of three replicas (the cluster has a leader of its own).
    pub async fn start() -> NatsCluster {
        let name = format!("test-{}", random_hex(4));
        // Each node must know the others' route ports before it starts.
        let listeners: Vec<std::net::TcpListener> = (0..3)
            .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
            .collect();
        let ports: Vec<u16> = listeners
            .iter()
            .map(|l| l.local_addr().unwrap().port())
            .collect();
        drop(listeners);
        let names: Vec<String> = (1..=3).map(|n| format!("n{n}")).collect();
        let nodes = (0..3)
            .map(|i| {
                let routes: Vec<u16> = (0..3).filter(|&j| j != i).map(|j| ports[j]).collect();
                NatsServer::start_with(NatsServerOptions {
                    cluster: Some(ClusterNode {
                        name: &names[i],
                        cluster: &name,
                        port: ports[i],
                        routes: &routes,
                    }),
                    ..Default::default()
                })
            })
            .collect();
        let cluster = NatsCluster { nodes, names };
        cluster.wait_ready(Duration::from_secs(30)).await;
        cluster
    }

    /// Waits until a stream of three replicas can be created, then deletes
    /// it.
    async fn wait_ready(&self, limit: Duration) {
        let js = self.jetstream().await;
        let deadline = tokio::time::Instant::now() + limit;
        let probe = format!("PROBE_{}", random_hex(4));
        loop {
            let created = js
                .create_stream(stream::Config {
                    name: probe.clone(),
                    subjects: vec![format!("probe.{}", random_hex(4))],
                    num_replicas: 3,
                    ..Default::default()
                })
                .await;
            match created {
                Ok(_) => break,
                Err(e) => assert!(
                    tokio::time::Instant::now() < deadline,
                    "the cluster places no stream of three replicas: {e}"
                ),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        js.delete_stream(&probe).await.unwrap();
    }

    /// Every node's client URL, comma-separated, as `NATS_URL` takes them.
    pub fn url(&self) -> String {
        self.nodes
            .iter()
            .map(NatsServer::url)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The test's own client, given every node.
    pub async fn client(&self) -> async_nats::Client {
        let urls: Vec<String> = self.nodes.iter().map(NatsServer::url).collect();
        async_nats::ConnectOptions::new()
            .connect(urls)
            .await
            .unwrap()
    }

    pub async fn jetstream(&self) -> jetstream::Context {
        jetstream::new(self.client().await)
    }

    /// The node JetStream knows by `name`.
    pub fn node(&mut self, name: &str) -> &mut NatsServer {
        let i = self
            .names
            .iter()
            .position(|n| n == name)
            .unwrap_or_else(|| panic!("no node {name} in {:?}", self.names));
        &mut self.nodes[i]
    }
}

/// An operator, the account it signed with JetStream unlimited, a system
/// account, and one user of the account: the JWTs `nsc` would make, for a
/// server in operator mode.
pub struct TestOperator {
    operator_jwt: String,
    system_account: String,
    /// Each account's public key and JWT, preloaded into the server.
    accounts: Vec<(String, String)>,
    /// The user's JWT, signed by the account.
    pub user_jwt: String,
    /// The user's NKey seed (`SU…`): what proves it is the user.
    pub user_seed: String,
}

impl TestOperator {
    pub fn new() -> TestOperator {
        let operator = nkeys::KeyPair::new_operator();
        let account = nkeys::KeyPair::new_account();
        let system = nkeys::KeyPair::new_account();
        let user = nkeys::KeyPair::new_user();
        let operator_jwt = nats_jwt(
            &operator,
            &operator.public_key(),
            "test-operator",
            serde_json::json!({"type": "operator", "version": 2}),
        );
        let unlimited = serde_json::json!({
            "subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1,
            "wildcards": true, "conn": -1, "leaf": -1,
        });
        let mut with_jetstream = unlimited.clone();
        // Zero storage (the default) is JetStream disabled for the account.
        for limit in ["mem_storage", "disk_storage", "streams", "consumer"] {
            with_jetstream[limit] = (-1).into();
        }
        let account_jwt = nats_jwt(
            &operator,
            &account.public_key(),
            "receiver",
            serde_json::json!({
                "limits": with_jetstream,
                "default_permissions": {"pub": {}, "sub": {}},
                "type": "account",
                "version": 2,
            }),
        );
        let system_jwt = nats_jwt(
            &operator,
            &system.public_key(),
            "SYS",
            serde_json::json!({
                "limits": unlimited,
                "default_permissions": {"pub": {}, "sub": {}},
                "type": "account",
                "version": 2,
            }),
        );
        let user_jwt = nats_jwt(
            &account,
            &user.public_key(),
            "receiver",
            serde_json::json!({
                "pub": {}, "sub": {}, "subs": -1, "data": -1, "payload": -1,
                "type": "user",
                "version": 2,
            }),
        );
        TestOperator {
            operator_jwt,
            system_account: system.public_key(),
            accounts: vec![
                (account.public_key(), account_jwt),
                (system.public_key(), system_jwt),
            ],
            user_jwt,
            user_seed: user.seed().unwrap(),
        }
    }

    /// The user's credentials file, as `nsc generate creds` writes it.
    pub fn creds(&self) -> String {
        format!(
            "-----BEGIN NATS USER JWT-----\n{}\n------END NATS USER JWT------\n\n\
             ************************* IMPORTANT *************************\n\
             NKEY Seed printed below can be used to sign and prove identity.\n\
             NKEYs are sensitive and should be treated as secrets.\n\n\
             -----BEGIN USER NKEY SEED-----\n{}\n------END USER NKEY SEED------\n\n\
             *************************************************************\n",
            self.user_jwt, self.user_seed
        )
    }

    /// The server configuration that trusts this operator and knows its
    /// accounts without a resolver to ask.
    fn server_config(&self) -> String {
        let preload: String = self
            .accounts
            .iter()
            .map(|(key, jwt)| format!("  {key}: \"{jwt}\"\n"))
            .collect();
        format!(
            "operator: \"{}\"\nsystem_account: {}\nresolver: MEMORY\nresolver_preload: {{\n{preload}}}\n",
            self.operator_jwt, self.system_account
        )
    }
}

/// A NATS JWT: `subject`'s claims with `nats`, signed by `issuer`.
fn nats_jwt(issuer: &nkeys::KeyPair, subject: &str, name: &str, nats: serde_json::Value) -> String {
    use data_encoding::{BASE32_NOPAD, BASE64URL_NOPAD};
    use sha2::{Digest, Sha256};
    let iat = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let mut claims = serde_json::json!({
        "iat": iat,
        "iss": issuer.public_key(),
        "sub": subject,
        "name": name,
        "nats": nats,
    });
    // The claims' hash names them; every JWT made here differs by its keys.
    claims["jti"] = BASE32_NOPAD
        .encode(&Sha256::digest(claims.to_string()))
        .into();
    let header = BASE64URL_NOPAD.encode(br#"{"typ":"JWT","alg":"ed25519-nkey"}"#);
    let payload = BASE64URL_NOPAD.encode(claims.to_string().as_bytes());
    let signed = format!("{header}.{payload}");
    let signature = issuer.sign(signed.as_bytes()).unwrap();
    format!("{signed}.{}", BASE64URL_NOPAD.encode(&signature))
}

/// One queue's events on JetStream: a stream, its subject, and a durable
/// pull consumer filtering that subject, as an operator would set them up.
pub struct JetStreamQueue {
    pub js: jetstream::Context,
    pub queue: String,
    pub stream: String,
    pub consumer: String,
    pub subject: String,
}

impl JetStreamQueue {
    /// A stream `ORBIT_<hex>` on `orbit.results.<queue>` and a durable pull
    /// consumer `receiver` with this AckWait (lease) and MaxDeliver (budget).
    pub async fn create(
        server: &NatsServer,
        queue: &str,
        ack_wait: Duration,
        max_deliver: i64,
    ) -> JetStreamQueue {
        let js = server.jetstream().await;
        let stream = format!("ORBIT_{}", random_hex(4));
        let subject = format!("orbit.results.{queue}");
        let created = js
            .create_stream(stream::Config {
                name: stream.clone(),
                subjects: vec![subject.clone()],
                ..Default::default()
            })
            .await
            .unwrap();
        created
            .create_consumer(consumer::pull::Config {
                durable_name: Some("receiver".into()),
                filter_subject: subject.clone(),
                ack_policy: consumer::AckPolicy::Explicit,
                ack_wait,
                max_deliver,
                ..Default::default()
            })
            .await
            .unwrap();
        JetStreamQueue {
            js,
            queue: queue.to_owned(),
            stream,
            consumer: "receiver".into(),
            subject,
        }
    }

    /// Publishes one event's bytes; returns its stream sequence.
    pub async fn publish(&self, body: impl Into<bytes::Bytes>) -> u64 {
        self.js
            .publish(self.subject.clone(), body.into())
            .await
            .unwrap()
            .await
            .unwrap()
            .sequence
    }

    /// Publishes one event's bytes with a `Nats-Msg-Id`, as the bridge
    /// does; returns its stream sequence.
    pub async fn publish_with_id(&self, body: impl Into<bytes::Bytes>, id: &str) -> u64 {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Nats-Msg-Id", id);
        let ack = self
            .js
            .publish_with_headers(self.subject.clone(), headers, body.into())
            .await
            .unwrap()
            .await
            .unwrap();
        assert!(!ack.duplicate, "{ack:?}");
        ack.sequence
    }

    /// The durable consumer, for a test that pulls as a receiver would.
    pub async fn pull_consumer(&self) -> consumer::PullConsumer {
        self.js
            .get_stream(&self.stream)
            .await
            .unwrap()
            .get_consumer(&self.consumer)
            .await
            .unwrap()
    }

    /// The `NatsSettings` of this queue's consumer on `server_url`.
    pub fn settings(&self, server_url: &str) -> result_inbox::nats::NatsSettings {
        result_inbox::nats::NatsSettings {
            servers: result_inbox::nats::NatsServers::new(server_url),
            stream: self.stream.clone(),
            consumer: self.consumer.clone(),
            subject: self.subject.clone(),
            queue_id: result_inbox::ids::QueueId::parse(&self.queue).unwrap(),
        }
    }

    /// The durable consumer's state as the server reports it.
    pub async fn info(&self) -> consumer::Info {
        self.js
            .get_stream(&self.stream)
            .await
            .unwrap()
            .consumer_info(&self.consumer)
            .await
            .unwrap()
    }

    /// Waits until every published message is acknowledged (nothing pending,
    /// nothing waiting for an ACK), or panics with the state after `limit`.
    /// A question the server does not answer (a cluster electing a leader)
    /// is asked again.
    pub async fn wait_all_acked(&self, limit: Duration) -> consumer::Info {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let info = async {
                self.js
                    .get_stream(&self.stream)
                    .await?
                    .consumer_info(&self.consumer)
                    .await
                    .map_err(async_nats::Error::from)
            }
            .await;
            let state = match info {
                Ok(info) if info.num_pending == 0 && info.num_ack_pending == 0 => return info,
                Ok(info) => format!(
                    "pending {} ack pending {} redelivered {}",
                    info.num_pending, info.num_ack_pending, info.num_redelivered
                ),
                Err(e) => format!("no answer: {e}"),
            };
            assert!(
                tokio::time::Instant::now() < deadline,
                "not all acknowledged: {state}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The environment of `receiver consume --source nats` for this queue.
    pub fn env(&self, server_url: &str) -> Vec<(String, String)> {
        vec![
            ("RECEIVER_SOURCE".into(), "nats".into()),
            ("NATS_URL".into(), server_url.to_owned()),
            ("NATS_STREAM".into(), self.stream.clone()),
            ("NATS_CONSUMER".into(), self.consumer.clone()),
            ("ORBIT_QUEUE_ID".into(), self.queue.clone()),
        ]
    }
}

/// What an armed [`AckLosingProxy`] does to the next acknowledgement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckFault {
    /// The acknowledgement reaches the server, which acknowledges the
    /// message; its confirmation is lost with the connection.
    LoseConfirmation,
    /// The acknowledgement never reaches the server, and nothing more goes
    /// up or comes down until the client closes its connection: the
    /// consumer is as good as dead after its COMMIT.
    LoseAck,
}

/// A TCP proxy in front of a nats-server that, once armed, spoils the next
/// acknowledgement (`PUB $JS.ACK.…`) as its [`AckFault`] says and cuts both
/// connections.
pub struct AckLosingProxy {
    pub port: u16,
    armed: Arc<Mutex<Option<AckFault>>>,
    fired: Arc<AtomicU32>,
    accept: JoinHandle<()>,
}

impl AckLosingProxy {
    pub async fn start(server_port: u16) -> AckLosingProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let armed = Arc::new(Mutex::new(None));
        let fired = Arc::new(AtomicU32::new(0));
        let (a, f) = (armed.clone(), fired.clone());
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(("127.0.0.1", server_port)).await else {
                    continue;
                };
                tokio::spawn(relay(client, server, a.clone(), f.clone()));
            }
        });
        AckLosingProxy {
            port,
            armed,
            fired,
            accept,
        }
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Spoils the next acknowledgement.
    pub fn arm(&self, fault: AckFault) {
        *self.armed.lock().unwrap() = Some(fault);
    }

    /// How many confirmations were lost.
    pub fn fired(&self) -> u32 {
        self.fired.load(Ordering::SeqCst)
    }
}

impl Drop for AckLosingProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn relay(
    client: TcpStream,
    server: TcpStream,
    armed: Arc<Mutex<Option<AckFault>>>,
    fired: Arc<AtomicU32>,
) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let cut = Arc::new(tokio::sync::Notify::new());
    let cut_up = cut.clone();
    let frozen = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let freeze = frozen.clone();
    let upstream = async move {
        let mut buf = vec![0u8; 64 * 1024];
        let mut tail = Vec::new();
        loop {
            let n = match client_read.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            tail.extend_from_slice(&buf[..n]);
            let seen = tail.windows(12).any(|w| w == b"PUB $JS.ACK.");
            let keep = tail.len().saturating_sub(11);
            tail.drain(..keep);
            let fault = if seen {
                armed.lock().unwrap().take()
            } else {
                None
            };
            if fault != Some(AckFault::LoseAck) && server_write.write_all(&buf[..n]).await.is_err()
            {
                return;
            }
            if fault.is_some() {
                fired.fetch_add(1, Ordering::SeqCst);
                if fault == Some(AckFault::LoseAck) {
                    // Nothing more goes up or comes down until the client's
                    // connection ends (its process is killed).
                    freeze.store(true, Ordering::SeqCst);
                    cut_up.notify_one();
                    while matches!(client_read.read(&mut buf).await, Ok(n) if n > 0) {}
                    return;
                }
                cut_up.notify_one();
                return;
            }
        }
    };
    let downstream = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            tokio::select! {
                // From the moment the acknowledgement went up, nothing more
                // comes down: its confirmation is lost with the connection.
                _ = cut.notified() => {
                    if frozen.load(Ordering::SeqCst) {
                        std::future::pending::<()>().await;
                    }
                    return;
                }
                read = server_read.read(&mut buf) => {
                    let n = match read {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    if client_write.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            }
        }
    };
    // Either direction ending ends both: the halves are dropped here.
    tokio::select! {
        _ = upstream => {}
        _ = downstream => {}
    }
}

/// A stream `NOTIFY_<hex>` that captures `subject` alone, file storage,
/// `config` changed as the test needs (a duplicate window, a size limit).
pub async fn notify_stream(
    js: &jetstream::Context,
    subject: &str,
    config: impl FnOnce(&mut stream::Config),
) -> String {
    let name = format!("NOTIFY_{}", random_hex(4));
    let mut stream = stream::Config {
        name: name.clone(),
        subjects: vec![subject.to_owned()],
        ..Default::default()
    };
    config(&mut stream);
    js.create_stream(stream).await.unwrap();
    name
}

/// Every message `stream` holds, in stream order.
pub async fn stream_messages(
    js: &jetstream::Context,
    stream: &str,
) -> Vec<jetstream::message::StreamMessage> {
    let mut handle = js.get_stream(stream).await.unwrap();
    let state = handle.info().await.unwrap().state.clone();
    let mut messages = Vec::new();
    for sequence in state.first_sequence..=state.last_sequence {
        if state.messages == 0 {
            break;
        }
        messages.push(handle.get_raw_message(sequence).await.unwrap());
    }
    messages
}

/// The value of header `name` (in any case) of `message`.
pub fn header(message: &jetstream::message::StreamMessage, name: &str) -> Option<String> {
    message
        .headers
        .iter()
        .find(|(n, _)| n.to_string().eq_ignore_ascii_case(name))
        .and_then(|(_, values)| values.first())
        .map(|value| value.as_str().to_owned())
}
