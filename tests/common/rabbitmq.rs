//! RabbitMQ for the tests: a quorum queue of a test's own on the suite's
//! throwaway node (`scripts/with-rabbitmq.sh`), a node of a test's own
//! where it must be killed and restarted (`scripts/rabbitmq-node.sh`), and
//! a publisher that waits for the server's confirms.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use amqprs::callbacks::ChannelCallback;
use amqprs::channel::{
    BasicGetArguments, BasicPublishArguments, Channel, ConfirmSelectArguments,
    QueueDeclareArguments,
};
use amqprs::connection::{Connection, OpenConnectionArguments};
use amqprs::{Ack, BasicProperties, Cancel, CloseChannel, Nack, Return};
use result_inbox::ids::QueueId;
use result_inbox::rabbitmq::{provision, AmqpUrl, QueueSpec, RabbitSettings};

use super::random_hex;

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/rabbitmq-node.sh")
}

/// A RabbitMQ node: the suite's, or one a test owns (stopped and removed
/// when dropped).
pub struct RabbitNode {
    pub port: u16,
    dir: Option<PathBuf>,
}

impl RabbitNode {
    /// The suite's throwaway node. Tests never run against any other.
    pub fn shared() -> RabbitNode {
        let url = std::env::var("RESULT_INBOX_TEST_AMQP_URL").unwrap_or_else(|_| {
            panic!(
                "RESULT_INBOX_TEST_AMQP_URL is not set: run the tests with `make test` or \
                 under scripts/with-rabbitmq.sh, which starts a throwaway RabbitMQ node"
            )
        });
        RabbitNode {
            port: port_of(&url),
            dir: None,
        }
    }

    /// A node of the test's own, which it may kill and restart.
    pub fn own() -> RabbitNode {
        let dir = std::env::temp_dir().join(format!("result-inbox-rabbitmq-{}", random_hex(6)));
        let port = Self::run(&["start", dir.to_str().unwrap()]);
        RabbitNode {
            port,
            dir: Some(dir),
        }
    }

    fn run(args: &[&str]) -> u16 {
        let out = Command::new(script()).args(args).output().unwrap();
        assert!(
            out.status.success(),
            "rabbitmq-node.sh {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .strip_prefix("amqp_port=")
            .map_or(0, |port| port.parse().unwrap())
    }

    /// The node's process (its pid file), or 0 when it cannot be read.
    pub fn pid(&self) -> u32 {
        let dir = match &self.dir {
            Some(dir) => dir.clone(),
            None => {
                PathBuf::from(std::env::var("RESULT_INBOX_TEST_RABBITMQ_DIR").unwrap_or_default())
            }
        };
        std::fs::read_to_string(dir.join("pid"))
            .ok()
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or(0)
    }

    /// `amqp://guest:guest@127.0.0.1:PORT/`.
    pub fn url(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}/", self.port)
    }

    /// Kills the node at once (SIGKILL), as a crashed machine would stop.
    pub fn kill(&self) {
        let dir = self.dir.as_ref().expect("only a node of the test's own");
        Self::run(&["stop", dir.to_str().unwrap()]);
    }

    /// Kills the node and starts it again on the same port and data: its
    /// queues and their messages are back.
    pub fn restart(&self) {
        let dir = self.dir.as_ref().expect("only a node of the test's own");
        Self::run(&["restart", dir.to_str().unwrap()]);
    }
}

impl Drop for RabbitNode {
    fn drop(&mut self) {
        if let Some(dir) = &self.dir {
            let _ = Command::new(script())
                .args(["stop", dir.to_str().unwrap()])
                .output();
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// A queue's quorum queue (and dead-letter queue) on a node, as
/// `receiver subscribe --source rabbitmq` declares them.
pub struct RabbitQueue {
    pub url: String,
    pub queue_id: String,
    pub queue: String,
}

impl RabbitQueue {
    /// Declares the queue of a fresh queue id with `delivery_limit`.
    pub async fn create(node: &RabbitNode, delivery_limit: u32) -> RabbitQueue {
        Self::create_for(node, &random_hex(16), delivery_limit).await
    }

    /// Declares the queue of `queue_id` with `delivery_limit`.
    pub async fn create_for(node: &RabbitNode, queue_id: &str, delivery_limit: u32) -> RabbitQueue {
        let queue_id = queue_id.to_owned();
        let settings = RabbitSettings::new(
            AmqpUrl::parse(&node.url()).unwrap(),
            RabbitSettings::default_queue(&QueueId::parse(&queue_id).unwrap()),
            QueueId::parse(&queue_id).unwrap(),
        );
        provision(
            &settings,
            QueueSpec { delivery_limit },
            Duration::from_secs(10),
        )
        .await
        .unwrap();
        RabbitQueue {
            url: node.url(),
            queue: settings.queue.clone(),
            queue_id,
        }
    }

    /// The environment of `receiver consume --source rabbitmq` for this
    /// queue (a failed attempt is returned after 200 ms).
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            ("RECEIVER_SOURCE".into(), "rabbitmq".into()),
            ("AMQP_URL".into(), self.url.clone()),
            ("ORBIT_QUEUE_ID".into(), self.queue_id.clone()),
            ("AMQP_RETRY_AFTER".into(), "200ms".into()),
        ]
    }

    /// The dead-letter queue.
    pub fn failed(&self) -> String {
        format!("{}.failed", self.queue)
    }

    /// Publishes each body to the queue (persistent, through the default
    /// exchange) and returns once the server confirmed them all.
    pub async fn publish(&self, bodies: &[String]) {
        Publisher::open(&self.url)
            .await
            .publish(&self.queue, bodies)
            .await;
    }

    /// Messages ready in `queue` (not those held by a consumer).
    pub async fn ready(&self, queue: &str) -> u32 {
        let connection = connect(&self.url).await;
        let channel = connection.open_channel(None).await.unwrap();
        let declared = channel
            .queue_declare(QueueDeclareArguments::new(queue).passive(true).finish())
            .await
            .unwrap()
            .unwrap();
        let _ = connection.close().await;
        declared.1
    }

    /// Takes the next message of `queue` for good (the test's reading of a
    /// dead-letter queue), with its headers.
    pub async fn take(&self, queue: &str) -> Option<(BasicProperties, Vec<u8>)> {
        let connection = connect(&self.url).await;
        let channel = connection.open_channel(None).await.unwrap();
        let got = channel
            .basic_get(BasicGetArguments::new(queue).no_ack(true).finish())
            .await
            .unwrap();
        let _ = connection.close().await;
        got.map(|(_, properties, body)| (properties, body))
    }
}

/// The port of a test node's `amqp://guest:guest@127.0.0.1:PORT/`.
fn port_of(url: &str) -> u16 {
    url.rsplit_once(':')
        .and_then(|(_, rest)| rest.trim_end_matches('/').parse().ok())
        .expect("a test node's address names its port")
}

/// The test's own connection to a node's `amqp://guest:guest@127.0.0.1:PORT/`.
async fn connect(url: &str) -> Connection {
    Connection::open(&OpenConnectionArguments::new(
        "127.0.0.1",
        port_of(url),
        "guest",
        "guest",
    ))
    .await
    .unwrap()
}

/// A channel in confirm mode and the confirms it has received.
pub struct Publisher {
    connection: Connection,
    channel: Channel,
    confirmed: Arc<Mutex<Confirmed>>,
    published: u64,
}

/// Every delivery tag up to `through` is confirmed, and those in `beyond`.
#[derive(Default)]
struct Confirmed {
    through: u64,
    beyond: BTreeSet<u64>,
}

impl Confirmed {
    fn up_to(&mut self, tag: u64) {
        self.through = self.through.max(tag);
        self.settle();
    }

    fn one(&mut self, tag: u64) {
        self.beyond.insert(tag);
        self.settle();
    }

    fn settle(&mut self) {
        let through = self.through;
        self.beyond.retain(|tag| *tag > through);
        while self.beyond.remove(&(self.through + 1)) {
            self.through += 1;
        }
    }
}

impl Publisher {
    pub async fn open(url: &str) -> Publisher {
        let connection = connect(url).await;
        let channel = connection.open_channel(None).await.unwrap();
        let confirmed = Arc::new(Mutex::new(Confirmed::default()));
        channel
            .register_callback(Confirms(confirmed.clone()))
            .await
            .unwrap();
        channel
            .confirm_select(ConfirmSelectArguments::default())
            .await
            .unwrap();
        Publisher {
            connection,
            channel,
            confirmed,
            published: 0,
        }
    }

    /// Publishes each body with a message id of its own, and waits for the
    /// server's confirms.
    pub async fn publish(&mut self, queue: &str, bodies: &[String]) {
        for body in bodies {
            let properties = BasicProperties::default()
                .with_message_id(&random_hex(8))
                .finish();
            self.send(queue, properties, body).await;
        }
        self.confirmed().await;
    }

    /// Publishes one body with these properties (made persistent), and
    /// waits for the server's confirm.
    pub async fn publish_as(&mut self, queue: &str, properties: BasicProperties, body: &str) {
        self.send(queue, properties, body).await;
        self.confirmed().await;
    }

    async fn send(&mut self, queue: &str, mut properties: BasicProperties, body: &str) {
        properties.with_persistence(true);
        self.channel
            .basic_publish(
                properties,
                body.as_bytes().to_vec(),
                BasicPublishArguments::new("", queue)
                    .mandatory(true)
                    .finish(),
            )
            .await
            .unwrap();
        self.published += 1;
    }

    async fn confirmed(&self) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let confirmed = self.confirmed.lock().unwrap().through;
            if confirmed >= self.published {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "RabbitMQ confirmed {confirmed} of {} publishes",
                self.published
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    pub async fn close(self) {
        let _ = self.connection.close().await;
    }
}

/// Counts the confirmed delivery tags (a confirm may cover every tag up
/// to its own).
struct Confirms(Arc<Mutex<Confirmed>>);

#[async_trait::async_trait]
impl ChannelCallback for Confirms {
    async fn close(&mut self, _: &Channel, _: CloseChannel) -> Result<(), amqprs::error::Error> {
        Ok(())
    }
    async fn cancel(&mut self, _: &Channel, _: Cancel) -> Result<(), amqprs::error::Error> {
        Ok(())
    }
    async fn flow(&mut self, _: &Channel, active: bool) -> Result<bool, amqprs::error::Error> {
        Ok(active)
    }
    async fn publish_ack(&mut self, _: &Channel, ack: Ack) {
        let mut confirmed = self.0.lock().unwrap();
        if ack.mutiple() {
            confirmed.up_to(ack.delivery_tag());
        } else {
            confirmed.one(ack.delivery_tag());
        }
    }
    async fn publish_nack(&mut self, _: &Channel, nack: Nack) {
        panic!("RabbitMQ refused a publish: {nack:?}");
    }
    async fn publish_return(&mut self, _: &Channel, ret: Return, _: BasicProperties, _: Vec<u8>) {
        panic!("RabbitMQ routed a publish nowhere: {ret:?}");
    }
}

/// A TCP proxy in front of a node that, once frozen, drops everything the
/// client sends (an acknowledgement never arrives) while the server's
/// frames still reach the client. A client that goes away takes its
/// upstream connection with it, as a killed process's socket would.
pub struct FreezingProxy {
    pub port: u16,
    frozen: Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl FreezingProxy {
    pub async fn start(upstream: u16) -> FreezingProxy {
        use std::sync::atomic::AtomicBool;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        use tokio::net::{TcpListener, TcpStream};

        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let frozen = Arc::new(AtomicBool::new(false));
        let flag = frozen.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await else {
                    continue;
                };
                let frozen = flag.clone();
                tokio::spawn(async move {
                    let (mut from_client, mut to_client) = client.into_split();
                    let (mut from_server, mut to_server) = server.into_split();
                    let up = async {
                        let mut buf = vec![0u8; 64 * 1024];
                        loop {
                            match from_client.read(&mut buf).await {
                                Ok(0) | Err(_) => break,
                                Ok(n) if !frozen.load(std::sync::atomic::Ordering::SeqCst) => {
                                    if to_server.write_all(&buf[..n]).await.is_err() {
                                        break;
                                    }
                                }
                                Ok(_) => {}
                            }
                        }
                    };
                    let down = tokio::io::copy(&mut from_server, &mut to_client);
                    // Either side ending ends both.
                    tokio::select! {
                        _ = up => {}
                        _ = down => {}
                    }
                });
            }
        });
        FreezingProxy { port, frozen, task }
    }

    /// `amqp://guest:guest@127.0.0.1:PORT/` through the proxy.
    pub fn url(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}/", self.port)
    }

    /// From now on nothing the clients send reaches the server.
    pub fn freeze(&self) {
        self.frozen.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Drop for FreezingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Declares a durable classic queue named `queue`, as someone may have
/// before the receiver came.
pub async fn declare_classic(url: &str, queue: &str) {
    let connection = connect(url).await;
    let channel = connection.open_channel(None).await.unwrap();
    channel
        .queue_declare(QueueDeclareArguments::durable_client_named(queue))
        .await
        .unwrap();
    let _ = connection.close().await;
}
