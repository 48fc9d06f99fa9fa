//! `receiver demo`: the whole path once (see [`crate::demo`]).

use result_inbox::db::Engine;
use result_inbox::inbox::{InboxStore, StoreOptions};
use result_inbox::sqlx::MySql;
#[cfg(feature = "postgres")]
use result_inbox::sqlx::Postgres;

use super::orbit_client;
use crate::args::Receiver;
use crate::demo;
use crate::exit::{config, fail, failed, printed, Outcome, EXIT_FAILED};
use crate::runtime::until_shutdown;

pub(crate) fn run_demo(receiver: Receiver) -> Outcome {
    let resolved = receiver.resolve().map_err(config)?;
    match resolved.dsn.engine() {
        #[cfg(feature = "postgres")]
        result_inbox::db::EngineKind::Postgres => demo_on::<Postgres>(resolved),
        _ => demo_on::<MySql>(resolved),
    }
}

/// The demo on a store of engine `E`.
fn demo_on<E: Engine>(resolved: crate::args::Resolved) -> Outcome {
    let client = orbit_client(&resolved.orbit).map_err(config)?;
    until_shutdown(|shutdown| async move {
        // The demo's own check reports a database that cannot be reached.
        let store =
            InboxStore::<E>::open_lazy(&resolved.dsn, resolved.scope, StoreOptions::default())
                .map_err(config)?;
        let outcome = tokio::select! {
            _ = shutdown.cancelled() => return Err(fail(EXIT_FAILED, "demo interrupted by a signal")),
            outcome = demo::run(client, store) => outcome,
        };
        let report = outcome.map_err(|failure| {
            failed(
                matches!(&failure.error, demo::DemoError::Check(p) if p.is_configuration()),
                format!("demo failed: {}; {}", failure.error, failure.kept),
            )
        })?;
        printed(report.lines().join("\n"))
    })
}
