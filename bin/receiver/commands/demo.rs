//! `receiver demo`: the whole path once (see [`crate::demo`]).

use std::process::ExitCode;
use std::time::Duration;

use result_inbox::inbox::{InboxStore, StoreOptions};

use super::orbit_client;
use crate::args::Receiver;
use crate::demo;
use crate::exit::{config, fail, failed, Outcome, EXIT_FAILED};
use crate::runtime::{runtime, shutdown_on_signal};

pub(crate) fn run_demo(receiver: Receiver) -> Outcome {
    let resolved = receiver.resolve().map_err(config)?;
    let client = orbit_client(&resolved.orbit).map_err(config)?;
    let runtime = runtime();
    let shutdown = shutdown_on_signal(&runtime);
    let code = runtime.block_on(async {
        // The demo's own check reports a database that cannot be reached.
        let store = InboxStore::connect_lazy(&resolved.dsn, resolved.scope, StoreOptions::default());
        let outcome = tokio::select! {
            _ = shutdown.cancelled() => return Err(fail(EXIT_FAILED, "demo interrupted by a signal")),
            outcome = demo::run(client, store) => outcome,
        };
        match outcome {
            Ok(report) => {
                for line in report.lines() {
                    println!("{line}");
                }
                Ok(ExitCode::SUCCESS)
            }
            Err(failure) => Err(failed(
                matches!(&failure.error, demo::DemoError::Check(p) if p.is_configuration()),
                format!("demo failed: {}; {}", failure.error, failure.kept),
            )),
        }
    });
    runtime.shutdown_timeout(Duration::from_secs(1));
    code
}
