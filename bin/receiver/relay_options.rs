//! How a relay (beside `consume`, or `receiver relay` alone) claims, sends
//! and gives up, from the `RECEIVER_RELAY_*` settings: each read by clap,
//! then checked against each other and the webhook's timeout.

use std::time::Duration;

use clap::Args;

use result_inbox::relay::RelayOptions;

use crate::args::{positive_duration, shown_duration};
use crate::config::ConfigError;

/// How a relay (beside `consume`, or `receiver relay` alone) claims,
/// sends and gives up; only read with a notify target. The defaults are
/// the library's `RelayOptions::default()`.
#[derive(Args, Clone)]
pub(crate) struct RelayOptionArgs {
    /// Effects the relay sends at once, each of another ordering key (a
    /// task's notifications still go one after the other), 1 to 1024.
    #[arg(long, env = "RECEIVER_RELAY_CONCURRENCY", default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub(crate) relay_concurrency: u32,
    /// How often the relay looks for due effects when no COMMIT woke it
    /// (`receiver relay` alone is never woken): 50ms, 1s, 1m.
    #[arg(long, env = "RECEIVER_RELAY_POLL_INTERVAL", default_value = "1s", value_parser = positive_duration)]
    pub(crate) relay_poll_interval: Duration,
    /// How long a claimed effect is this relay's alone. Must be longer
    /// than RECEIVER_NOTIFY_TIMEOUT: a lease that runs out while the
    /// webhook may still answer lets another relay send the effect at the
    /// same time. An effect whose relay died is sent again once it ran out.
    #[arg(long, env = "RECEIVER_RELAY_LEASE", default_value = "60s", value_parser = positive_duration)]
    pub(crate) relay_lease: Duration,
    /// The wait before an effect's second attempt; each next one doubles
    /// it, with jitter (between half and all of it).
    #[arg(long, env = "RECEIVER_RELAY_INITIAL_BACKOFF", default_value = "1s", value_parser = positive_duration)]
    pub(crate) relay_initial_backoff: Duration,
    /// The longest wait between attempts (a Retry-After may ask more); at
    /// least RECEIVER_RELAY_INITIAL_BACKOFF.
    #[arg(long, env = "RECEIVER_RELAY_MAX_BACKOFF", default_value = "10m", value_parser = positive_duration)]
    pub(crate) relay_max_backoff: Duration,
    /// Attempts after which an effect that keeps failing is dead (`receiver
    /// outbox replay` brings it back).
    #[arg(long, env = "RECEIVER_RELAY_MAX_ATTEMPTS", default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) relay_max_attempts: u32,
    /// Age (since it was recorded) after which an effect that fails again
    /// is dead.
    #[arg(long, env = "RECEIVER_RELAY_MAX_AGE", default_value = "24h", value_parser = positive_duration)]
    pub(crate) relay_max_age: Duration,
    /// How long a webhook that answered 410 Gone is left alone before its
    /// next effect is tried (its effect is dead at once).
    #[arg(long, env = "RECEIVER_RELAY_GONE_PAUSE", default_value = "10m", value_parser = positive_duration)]
    pub(crate) relay_gone_pause: Duration,
}

impl RelayOptionArgs {
    /// The relay's options, for a target that gives up on an attempt
    /// after `timeout` (`RECEIVER_NOTIFY_TIMEOUT`): each value was read
    /// already; here they are checked against each other.
    pub(crate) fn options(&self, timeout: Duration) -> Result<RelayOptions, ConfigError> {
        if self.relay_lease <= timeout {
            return Err(ConfigError::Invalid {
                variable: "RECEIVER_RELAY_LEASE",
                problem: format!(
                    "{} must be longer than RECEIVER_NOTIFY_TIMEOUT ({}): a lease that runs out while the webhook may still answer lets another relay send the effect at the same time",
                    shown_duration(self.relay_lease),
                    shown_duration(timeout)
                ),
            });
        }
        if self.relay_initial_backoff > self.relay_max_backoff {
            return Err(ConfigError::Invalid {
                variable: "RECEIVER_RELAY_INITIAL_BACKOFF",
                problem: format!(
                    "{} is longer than RECEIVER_RELAY_MAX_BACKOFF ({})",
                    shown_duration(self.relay_initial_backoff),
                    shown_duration(self.relay_max_backoff)
                ),
            });
        }
        let mut options = RelayOptions::default();
        options.concurrency = self.relay_concurrency as usize;
        options.poll_interval = self.relay_poll_interval;
        options.lease = self.relay_lease;
        options.initial_backoff = self.relay_initial_backoff;
        options.max_backoff = self.relay_max_backoff;
        options.max_attempts = self.relay_max_attempts;
        options.max_age = self.relay_max_age;
        options.gone_pause = self.relay_gone_pause;
        Ok(options)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The relay settings as `receiver relay` reads them with `args`.
    fn relay_args(args: &[&str]) -> RelayOptionArgs {
        use clap::{FromArgMatches, Parser};
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            relay: RelayOptionArgs,
        }
        let matches = <Cli as clap::CommandFactory>::command()
            .try_get_matches_from(std::iter::once("relay").chain(args.iter().copied()))
            .unwrap();
        Cli::from_arg_matches(&matches).unwrap().relay
    }

    #[test]
    fn the_relay_settings_default_to_the_library_s_options() {
        let options = relay_args(&[]).options(Duration::from_secs(10)).unwrap();
        let library = RelayOptions::default();
        assert_eq!(options.concurrency, library.concurrency);
        assert_eq!(options.poll_interval, library.poll_interval);
        assert_eq!(options.lease, library.lease);
        assert_eq!(options.initial_backoff, library.initial_backoff);
        assert_eq!(options.max_backoff, library.max_backoff);
        assert_eq!(options.max_attempts, library.max_attempts);
        assert_eq!(options.max_age, library.max_age);
        assert_eq!(options.gone_pause, library.gone_pause);
    }

    #[test]
    fn a_relay_setting_is_read_and_a_lease_not_longer_than_the_timeout_is_refused_by_name() {
        let args = relay_args(&[
            "--relay-lease=3s",
            "--relay-poll-interval=50ms",
            "--relay-concurrency=2",
            "--relay-max-attempts=3",
        ]);
        let options = args.options(Duration::from_millis(2500)).unwrap();
        assert_eq!(options.lease, Duration::from_secs(3));
        assert_eq!(options.poll_interval, Duration::from_millis(50));
        assert_eq!((options.concurrency, options.max_attempts), (2, 3));
        let err = args
            .options(Duration::from_secs(3))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with(
                "RECEIVER_RELAY_LEASE: 3s must be longer than RECEIVER_NOTIFY_TIMEOUT (3s)"
            ),
            "{err}"
        );
        let err = relay_args(&["--relay-initial-backoff=2m", "--relay-max-backoff=1m"])
            .options(Duration::from_secs(10))
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "RECEIVER_RELAY_INITIAL_BACKOFF: 120s is longer than RECEIVER_RELAY_MAX_BACKOFF (60s)"
        );
    }
}
