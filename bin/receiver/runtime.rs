//! The runtime the commands run on, and the signals that end them.

use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::exit::{Outcome, EXIT_FAILED};

/// From a SIGINT/SIGTERM to the end of the process, in every state.
pub(crate) const SHUTDOWN_LIMIT: Duration = Duration::from_secs(10);

/// One thread: a delivery is mostly waiting on sockets, and its own work
/// (a digest, a few statements) is small, so a second worker mostly adds
/// cross-thread wake-ups (measured end to end over NATS: 5.6 context
/// switches per delivery on two workers, 2.2 on one, and 40 % less CPU).
pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// Runs `command` with a token cancelled by the first SIGINT or SIGTERM,
/// then gives what still runs a second to end. The handlers are installed
/// before `command` starts, before any start-up step, so that a signal
/// during start-up is neither lost nor fatal. The same signal arms a
/// watchdog that ends the process [`SHUTDOWN_LIMIT`] after it, whatever is
/// still running: nothing un-ACKed is lost by that (its lease runs out),
/// and a service manager's own kill timer is never the one that fires.
pub(crate) fn until_shutdown<F: Future<Output = Outcome>>(
    command: impl FnOnce(CancellationToken) -> F,
) -> Outcome {
    let runtime = runtime();
    let shutdown = stop_on_signal(
        &runtime,
        "shutdown requested: no new deliveries, cancelling in-flight handlers",
    );
    let outcome = runtime.block_on(command(shutdown));
    runtime.shutdown_timeout(Duration::from_secs(1));
    outcome
}

/// A token cancelled by the first SIGINT or SIGTERM, as in
/// [`until_shutdown`]; the signal is logged as `notice` says.
pub(crate) fn stop_on_signal(
    runtime: &tokio::runtime::Runtime,
    notice: &'static str,
) -> CancellationToken {
    use tokio::signal::unix::{signal, SignalKind};
    let token = CancellationToken::new();
    let _context = runtime.enter();
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    let cancel = token.clone();
    runtime.spawn(async move {
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
        tracing::info!("{notice}");
        crate::systemd::stopping();
        std::thread::spawn(|| {
            std::thread::sleep(SHUTDOWN_LIMIT);
            crate::logging::report_fatal("shutdown did not finish within 10 s of the signal; exiting anyway (nothing un-ACKed is lost)", EXIT_FAILED);
            std::process::exit(EXIT_FAILED.into());
        });
        cancel.cancel();
    });
    token
}
