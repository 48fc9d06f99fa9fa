//! While `consume` runs on a server with standbys: whether a COMMIT it
//! confirms is on a synchronous standby too. Exported as
//! `receiver_database_synchronous_standbys`, and logged as a warning each
//! time it stops being so: from then until it is again, a failover can
//! lose deliveries the receiver applied and acknowledged.

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use result_inbox::db::Engine;
use result_inbox::inbox::InboxStore;
use result_inbox::telemetry::SYNCHRONOUS_STANDBYS;

/// How often the server is asked; as often as the breaker's probe.
const INTERVAL: Duration = Duration::from_secs(5);

/// Asks the store's server every [`INTERVAL`] until `shutdown`. A server
/// without standbys gets no gauge and no line; on an engine that says
/// nothing of them (MySQL) the watch ends at once; a server that cannot be
/// asked now is the breaker's to report.
pub(crate) async fn watch<E: Engine>(store: InboxStore<E>, shutdown: CancellationToken) {
    let mut synchronous: Option<bool> = None;
    loop {
        let asked = store.replication().await;
        // An engine that says nothing of its standbys never will.
        if let Ok(None) = asked {
            return;
        }
        if let Ok(Some(r)) = asked {
            if r.is_replicated() {
                metrics::gauge!(SYNCHRONOUS_STANDBYS).set(r.synchronous_standbys() as f64);
                let now = r.is_synchronous();
                match (synchronous, now) {
                    (None | Some(true), false) => {
                        warn!("database replication not synchronous: {r}")
                    }
                    (Some(false), true) => info!("database replication synchronous again: {r}"),
                    _ => {}
                }
                synchronous = Some(now);
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(INTERVAL) => {}
        }
    }
}
