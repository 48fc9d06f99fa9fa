//! `receiver demo`: the whole path once (see [`crate::demo`]).

use std::process::ExitCode;
use std::time::Duration;

use result_inbox::inbox::{InboxStore, StoreOptions};
use result_inbox::scope::InboxScope;

use super::orbit_client;
use crate::args::Receiver;
use crate::demo::{self, DemoOptions};
use crate::exit::{config, fail, Outcome, EXIT_CONFIG, EXIT_FAILED};
use crate::runtime::{runtime, shutdown_on_signal};

pub(crate) fn run_demo(receiver: Receiver) -> Outcome {
    let resolved = receiver.resolve().map_err(config)?;
    let client = orbit_client(&resolved.orbit).map_err(config)?;
    let options = DemoOptions::default();
    let runtime = runtime();
    let shutdown = shutdown_on_signal(&runtime);
    let code = runtime.block_on(async {
        let scope = InboxScope::new(resolved.name.clone(), resolved.orbit.queue_id.clone());
        // The demo's own check reports a database that cannot be reached.
        let store = InboxStore::connect_lazy(&resolved.dsn, scope, StoreOptions::default());
        let outcome = tokio::select! {
            _ = shutdown.cancelled() => return Err(fail(EXIT_FAILED, "demo interrupted by a signal")),
            outcome = demo::run(client, store, options) => outcome,
        };
        match outcome {
            Ok(report) => {
                for line in report.lines() {
                    println!("{line}");
                }
                Ok(ExitCode::SUCCESS)
            }
            Err(failure) => {
                let code = match &failure.error {
                    demo::DemoError::Check(p) if p.is_configuration() => EXIT_CONFIG,
                    _ => EXIT_FAILED,
                };
                Err(fail(
                    code,
                    format!("demo failed: {}; {}", failure.error, failure.kept),
                ))
            }
        }
    });
    runtime.shutdown_timeout(Duration::from_secs(1));
    code
}
