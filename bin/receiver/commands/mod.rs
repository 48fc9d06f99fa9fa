//! One file per command: its arguments where no other command shares them,
//! what it prints and its exit code. The flows that several commands share
//! (the self-check, the consumer's start-up) sit beside this folder.

pub(crate) mod check;
pub(crate) mod consume;
pub(crate) mod demo;
pub(crate) mod digest;
pub(crate) mod failures;
pub(crate) mod init;
pub(crate) mod inspect;
pub(crate) mod outbox;
pub(crate) mod prune;
pub(crate) mod relay;
pub(crate) mod replay;
pub(crate) mod stats;
pub(crate) mod subscribe;
pub(crate) mod verify;

use std::time::Duration;

use result_inbox::orbit::OrbitClient;

use crate::config::OrbitSettings;

/// Timeout of every single call to Orbit.
pub(crate) const ORBIT_CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Timeout of every request to NATS or RabbitMQ, acknowledgements included.
#[cfg(any(feature = "nats", feature = "rabbitmq"))]
pub(crate) const BROKER_CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// How long `consume` lets pending ACKs finish after the signal; the rest of
/// [`SHUTDOWN_LIMIT`](crate::runtime::SHUTDOWN_LIMIT) is for closing
/// connections and exiting.
const CONSUME_GRACE: Duration = Duration::from_secs(7);

/// A client of this deployment with this token, every call limited to
/// [`ORBIT_CALL_TIMEOUT`], trusting the configured certificate authorities.
fn orbit_client(orbit: &OrbitSettings) -> Result<OrbitClient, String> {
    OrbitClient::with_tls(
        orbit.url.clone(),
        orbit.token.clone(),
        ORBIT_CALL_TIMEOUT,
        orbit.tls.clone(),
    )
    .map_err(|e| format!("ORBIT_URL: {e}"))
}

/// A progress bar on stderr, drawn only on a terminal: what `verify` and
/// `prune` report to as they go.
struct Progress(indicatif::ProgressBar);

impl Progress {
    fn new(template: &str) -> Self {
        let style = indicatif::ProgressStyle::with_template(template).expect("a valid template");
        let stderr = indicatif::ProgressDrawTarget::stderr();
        Self(indicatif::ProgressBar::with_draw_target(None, stderr).with_style(style))
    }
}
