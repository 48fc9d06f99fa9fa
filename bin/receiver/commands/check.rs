//! `receiver check`: every check once, one line each.

use std::process::ExitCode;

use crate::args::{required_subscription, NatsArgs, Receiver};
use crate::check::{self, CheckConfig};
use crate::exit::{fail, EXIT_CONFIG, EXIT_FAILED};
use crate::runtime::runtime;

use super::{NATS_CALL_TIMEOUT, ORBIT_CALL_TIMEOUT};

pub(crate) fn run_check(
    receiver: Receiver,
    subscription_id: Option<String>,
    demo: bool,
) -> ExitCode {
    let resolved = match receiver.resolve() {
        Ok(r) => r,
        Err(e) => return fail(EXIT_CONFIG, e),
    };
    // `consume` needs a subscription; `demo` creates its own, and checks
    // one only when it is given.
    let subscription = match (demo, subscription_id) {
        (true, None) => None,
        (_, id) => match required_subscription(id) {
            Ok(s) => Some(s),
            Err(e) => return fail(EXIT_CONFIG, e),
        },
    };
    let config = CheckConfig {
        orbit: resolved.orbit,
        dsn: resolved.dsn,
        name: resolved.name,
        subscription,
        demo,
        orbit_call_timeout: ORBIT_CALL_TIMEOUT,
    };
    match runtime().block_on(check::run(config)) {
        Ok(findings) => print_findings(&findings),
        Err(e) => fail(EXIT_CONFIG, format!("ORBIT_URL: {e}")),
    }
}

pub(crate) fn run_check_nats(receiver: Receiver, nats: NatsArgs) -> ExitCode {
    let (dsn, name, settings) = match receiver.resolve_for_nats(nats) {
        Ok(r) => r,
        Err(e) => return fail(EXIT_CONFIG, e),
    };
    let findings = runtime().block_on(check::run_nats(&dsn, name, &settings, NATS_CALL_TIMEOUT));
    print_findings(&findings)
}

/// One line per check; exit 0 only if all passed.
pub(crate) fn print_findings(findings: &[check::Finding]) -> ExitCode {
    for finding in findings {
        println!("{finding}");
    }
    if findings.iter().all(|f| f.ok()) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_FAILED)
    }
}
