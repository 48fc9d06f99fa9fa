//! The RabbitMQ queue as a notify target: reached once RabbitMQ answers and
//! the queue is there (an effect sent to a queue that is not would be
//! tried again until one is declared).

use std::time::Duration;

use result_inbox::rabbitmq::AmqpUrl;
use result_inbox::relay::RabbitMq;
use result_inbox::retry::{until_answered, Backoff};

use crate::check::Problem;

/// The target publishing to `queue` on `url`, each attempt given
/// `timeout`, once RabbitMQ answers (waited for with `backoff` while it
/// cannot be reached) and the queue is there, which is a configuration
/// error when it is not.
pub(super) async fn target(
    url: &AmqpUrl,
    queue: &str,
    timeout: Duration,
    backoff: Backoff,
) -> Result<RabbitMq, Problem> {
    let target = RabbitMq::new(url.clone(), queue).with_timeout(timeout);
    until_answered(backoff, "RabbitMQ", Problem::is_transient, || {
        check(&target)
    })
    .await?;
    tracing::info!(url = %url.shown(), queue, "notifying a RabbitMQ queue");
    Ok(target)
}

/// `check=notify`'s part: RabbitMQ answers and `queue` is there. One
/// attempt.
pub(super) async fn reachable(
    url: &AmqpUrl,
    queue: &str,
    timeout: Duration,
) -> Result<(), Problem> {
    check(&RabbitMq::new(url.clone(), queue).with_timeout(timeout)).await
}

async fn check(target: &RabbitMq) -> Result<(), Problem> {
    target.check().await.map(drop).map_err(Problem::NotifyQueue)
}
