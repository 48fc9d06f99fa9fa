//! The Orbit checks: reachable, the token and its scopes (asked without
//! changing anything), the subscription's queue.

use result_inbox::ids::{QueueId, SubscriptionId};
use result_inbox::orbit::{OrbitClient, OrbitError, OrbitSource, Scope};

use super::Problem;

/// The Orbit checks, in order: `orbit`, `token`, `scopes`, `subscription`.
pub const ORBIT_CHECKS: [&str; 4] = ["orbit", "token", "scopes", "subscription"];

/// Checks that Orbit answers and the token is valid and has `scopes`.
pub async fn orbit_access(client: &OrbitClient, scopes: &[Scope]) -> Result<(), Problem> {
    client.health().await.map_err(orbit_problem)?;
    let mut missing = Vec::new();
    for &scope in scopes {
        if !client.has_scope(scope).await.map_err(orbit_problem)? {
            missing.push(scope);
        }
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(Problem::MissingScopes(missing))
    }
}

/// Checks that the subscription exists and is bound to `queue`.
pub async fn subscription(
    client: &OrbitClient,
    id: &SubscriptionId,
    queue: &QueueId,
) -> Result<(), Problem> {
    match OrbitSource::new(client.clone(), id.clone())
        .check(queue)
        .await
    {
        Ok(()) => Ok(()),
        Err(e) if e.is_subscription_refusal() => Err(Problem::Subscription(e.to_string())),
        Err(e) => Err(orbit_problem(e)),
    }
}

fn orbit_problem(e: OrbitError) -> Problem {
    if e.is_retryable() {
        Problem::OrbitUnreachable(e)
    } else if matches!(e, OrbitError::Status { status: 401, .. }) {
        Problem::Token(e)
    } else if let OrbitError::MissingScope { scope } = e {
        Problem::MissingScopes(vec![scope])
    } else {
        Problem::Orbit(e)
    }
}
