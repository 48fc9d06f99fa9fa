//! `receiver check`: every check once, one line each.

use std::process::ExitCode;

use crate::args::{required_subscription, NatsArgs, Receiver};
use crate::check::{self, CheckConfig};
use crate::exit::{config, Outcome, EXIT_FAILED};
use crate::runtime::runtime;

use super::{NATS_CALL_TIMEOUT, ORBIT_CALL_TIMEOUT};

pub(crate) fn run_check(
    receiver: Receiver,
    subscription_id: Option<String>,
    demo: bool,
) -> Outcome {
    let resolved = receiver.resolve().map_err(config)?;
    // `consume` needs a subscription; `demo` creates its own, and checks
    // one only when it is given.
    let subscription = match (demo, subscription_id) {
        (true, None) => None,
        (_, id) => Some(required_subscription(id).map_err(config)?),
    };
    let settings = CheckConfig {
        orbit: resolved.orbit,
        dsn: resolved.dsn,
        name: resolved.name,
        subscription,
        demo,
        orbit_call_timeout: ORBIT_CALL_TIMEOUT,
    };
    match runtime().block_on(check::run(settings)) {
        Ok(findings) => print_findings(&findings),
        Err(e) => Err(config(format!("ORBIT_URL: {e}"))),
    }
}

pub(crate) fn run_check_nats(receiver: Receiver, nats: NatsArgs) -> Outcome {
    let (dsn, name, settings) = receiver.resolve_for_nats(nats).map_err(config)?;
    let findings = runtime().block_on(check::run_nats(&dsn, name, &settings, NATS_CALL_TIMEOUT));
    print_findings(&findings)
}

/// One line per check; exit 0 only if all passed.
pub(crate) fn print_findings(findings: &[check::Finding]) -> Outcome {
    for finding in findings {
        println!("{finding}");
    }
    if findings.iter().all(|f| f.ok()) {
        Ok(ExitCode::SUCCESS)
    } else {
        Ok(ExitCode::from(EXIT_FAILED))
    }
}
