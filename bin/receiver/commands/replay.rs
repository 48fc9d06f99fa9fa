//! `receiver replay`: bring chosen failed deliveries back through the inbox
//! like any delivery. On Orbit each gets a limited new budget through the
//! admin call; over NATS the stored message is published again, and on
//! RabbitMQ the dead letter is published to the queue again and then taken
//! off the dead-letter queue. What would only fail again (a conflict, a
//! rejected event) is refused unless forced.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;

use result_inbox::diagnosis::Diagnosis;
#[cfg(feature = "nats")]
use result_inbox::nats;
use result_inbox::orbit::{readable_by_others, OrbitClient, OrbitError, Token};

use super::failures::{listing_failure, FailedArgs};
use super::ORBIT_CALL_TIMEOUT;
use crate::exit::{config, Failed, Outcome, EXIT_CONFIG, EXIT_FAILED};
use crate::failed::{list, FailedDelivery, Origin};
use crate::runtime::runtime;

/// What `replay` is given.
#[derive(Args)]
pub(crate) struct ReplayArgs {
    #[command(flatten)]
    failed: FailedArgs,
    /// Replay this delivery (Orbit's delivery id, the stream sequence with
    /// --source nats, the message key with --source rabbitmq); repeatable.
    #[arg(long = "delivery", value_name = "ID")]
    deliveries: Vec<String>,
    /// Replay every failed delivery with this diagnosis: apply, duplicate,
    /// stale, conflict or rejected; repeatable.
    #[arg(long = "diagnosis", value_name = "DIAGNOSIS", value_parser = clap::builder::PossibleValuesParser::new(Diagnosis::NAMES), ignore_case = true)]
    diagnoses: Vec<String>,
    /// Replay every failed delivery.
    #[arg(long, conflicts_with_all = ["deliveries", "diagnoses"])]
    all: bool,
    /// Print what each would become and change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Also replay deliveries diagnosed conflict or rejected, which can
    /// only fail again.
    #[arg(long)]
    force: bool,
    /// Orbit: the attempts each replayed delivery gets (1 to 100).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    add: u32,
    /// Orbit: the admin token the budget call needs. Never printed; consume
    /// never needs it.
    #[arg(long, env = "ORBIT_ADMIN_TOKEN", hide_env_values = true)]
    admin_token: Option<String>,
    /// Orbit: a file holding the admin token (instead of ORBIT_ADMIN_TOKEN).
    #[arg(long, env = "ORBIT_ADMIN_TOKEN_FILE", conflicts_with = "admin_token")]
    admin_token_file: Option<PathBuf>,
}

/// What became of one chosen delivery.
#[derive(Clone)]
enum Replay {
    Replayed(Option<String>),
    Skipped(String),
    Refused,
    DryRun,
    Failed(String),
    /// Orbit refused the admin token: the configuration's to fix.
    TokenRefused(String),
}

pub(crate) fn run_replay(args: ReplayArgs) -> Outcome {
    if !args.all && args.deliveries.is_empty() && args.diagnoses.is_empty() {
        return Err(config(
            "replay: choose what to replay: --delivery ID (repeatable), --diagnosis apply (repeatable) or --all (see `receiver replay --help`)",
        ));
    }
    let admin = match (&args.admin_token, &args.admin_token_file) {
        (Some(token), _) => Some(token.trim().to_owned()),
        (None, Some(path)) => Some(read_admin_token(path)?),
        (None, None) => None,
    };
    let (origin, dsn, scope) = args.failed.resolve()?;
    // An id the source could never have given names nothing: a typo or
    // the other source's id, which "skipped" would pass over in silence.
    if let Some(id) = args.deliveries.iter().find(|id| !origin.could_name(id)) {
        return Err(config(format!(
            "replay: --delivery {id:?} cannot be a delivery of this source: {}",
            origin.id_form()
        )));
    }
    let admin = match (&origin, admin) {
        (Origin::Orbit { client, .. }, Some(token)) if !args.dry_run => Some(
            OrbitClient::new(client.url().clone(), Token::new(token), ORBIT_CALL_TIMEOUT)
                .map_err(|e| config(format!("ORBIT_ADMIN_TOKEN: {e}")))?,
        ),
        (Origin::Orbit { .. }, None) if !args.dry_run => {
            return Err(config(
                "ORBIT_ADMIN_TOKEN is not set (or pass --admin-token-file): replay gives each delivery new budget through Orbit's admin call",
            ))
        }
        _ => None,
    };
    let runtime = runtime();
    let listed = runtime
        .block_on(list(&origin, &dsn, &scope))
        .map_err(|e| listing_failure("replay", e))?;
    let failed = listed.failed;
    let key = origin.key();
    let chosen: Vec<&FailedDelivery> = failed
        .iter()
        .filter(|f| {
            args.all
                || args.deliveries.contains(&f.id)
                || args
                    .diagnoses
                    .iter()
                    .any(|d| d.eq_ignore_ascii_case(f.word()))
        })
        .collect();
    // What would only fail again is replayed only when forced.
    let refused = |f: &FailedDelivery| f.fails_again() && !args.force;
    let brought_back = if args.dry_run {
        Default::default()
    } else {
        let keys: Vec<String> = chosen
            .iter()
            .filter(|f| !refused(f))
            .map(|f| f.id.clone())
            .collect();
        runtime.block_on(bring_back(&origin, &keys))
    };
    let mut lines = Vec::new();
    let mut tally = [0usize; 4];
    let mut token_refused = false;
    for id in args
        .deliveries
        .iter()
        .filter(|id| !failed.iter().any(|f| &f.id == *id))
    {
        lines.push(format!(
            "replay {key}={id} diagnosis=- result=skipped reason=\"not a failed delivery (acknowledged, replayed already, or unknown)\""
        ));
        tally[1] += 1;
    }
    for f in chosen {
        let result = if refused(f) {
            Replay::Refused
        } else if args.dry_run {
            Replay::DryRun
        } else {
            // Two dead letters may share a key: each line says what their
            // pass did.
            match brought_back.get(&f.id).cloned() {
                Some(result) => result,
                None => runtime.block_on(replay_one(&origin, admin.as_ref(), f, args.add)),
            }
        };
        let (word, detail) = match result {
            Replay::Replayed(detail) => {
                tally[0] += 1;
                ("replayed", detail)
            }
            Replay::Skipped(why) => {
                tally[1] += 1;
                ("skipped", Some(format!("reason={why:?}")))
            }
            Replay::Refused => {
                tally[2] += 1;
                (
                    "refused",
                    Some(
                        "reason=\"it would only fail again; --force replays it anyway\"".to_owned(),
                    ),
                )
            }
            Replay::DryRun => ("dry-run", None),
            Replay::Failed(why) => {
                tally[3] += 1;
                ("failed", Some(format!("reason={why:?}")))
            }
            Replay::TokenRefused(why) => {
                tally[3] += 1;
                token_refused = true;
                ("failed", Some(format!("reason={why:?}")))
            }
        };
        let mut line = format!("replay {key}={} diagnosis={} result={word}", f.id, f.word());
        if let Some(detail) = detail {
            line.push(' ');
            line.push_str(&detail);
        }
        lines.push(line);
    }
    for line in &lines {
        println!("{line}");
    }
    let [replayed, skipped, refused, failures] = tally;
    println!(
        "replay total={} replayed={replayed} skipped={skipped} refused={refused} failed={failures}{} database={}",
        lines.len(),
        if args.dry_run { " dry_run=true" } else { "" },
        listed.server
    );
    // A dry run that could list and diagnose did its work: what it would
    // refuse is in its lines, not in its exit code.
    if token_refused {
        Ok(ExitCode::from(EXIT_CONFIG))
    } else if failures > 0 {
        Ok(ExitCode::from(EXIT_FAILED))
    } else if refused > 0 && !args.dry_run {
        Ok(ExitCode::from(EXIT_CONFIG))
    } else {
        Ok(ExitCode::SUCCESS)
    }
}

/// The admin token from its file, which must be private as the
/// credentials file must: anyone who can read it can give any delivery
/// new attempts.
fn read_admin_token(path: &Path) -> Result<String, Failed> {
    let unreadable = |e: std::io::Error| {
        config(format!(
            "ORBIT_ADMIN_TOKEN_FILE: cannot read {}: {e}",
            path.display()
        ))
    };
    if readable_by_others(path).map_err(unreadable)? {
        return Err(config(format!(
            "ORBIT_ADMIN_TOKEN_FILE: {} is readable by group or others; make it private (chmod 600)",
            path.display()
        )));
    }
    Ok(std::fs::read_to_string(path)
        .map_err(unreadable)?
        .trim()
        .to_owned())
}

/// Brings back together the deliveries of a source that replays them in
/// one pass (RabbitMQ's dead-letter queue is read in order, not by key):
/// what became of each of `keys`. Other sources replay one at a time.
#[cfg_attr(not(feature = "rabbitmq"), allow(unused_variables))]
async fn bring_back(origin: &Origin, keys: &[String]) -> HashMap<String, Replay> {
    match origin {
        #[cfg(feature = "rabbitmq")]
        Origin::Rabbitmq(settings) if !keys.is_empty() => {
            let outcome = result_inbox::rabbitmq::replay(
                settings,
                crate::commands::BROKER_CALL_TIMEOUT,
                keys,
            )
            .await;
            keys.iter()
                .map(|key| {
                    let result = match &outcome {
                        Ok(replayed) => match (replayed.copies.get(key), &replayed.stopped) {
                            (Some(n), _) => Replay::Replayed(Some(format!(
                                "copies={n} queue={}",
                                settings.queue
                            ))),
                            (None, Some(e)) => Replay::Failed(e.to_string()),
                            (None, None) => Replay::Skipped(
                                "no longer in the dead-letter queue (replayed or taken meanwhile)"
                                    .to_owned(),
                            ),
                        },
                        Err(e) => Replay::Failed(e.to_string()),
                    };
                    (key.clone(), result)
                })
                .collect()
        }
        _ => HashMap::new(),
    }
}

/// Brings one delivery back: new budget on Orbit, the message published
/// again on NATS.
async fn replay_one(
    origin: &Origin,
    admin: Option<&OrbitClient>,
    f: &FailedDelivery,
    add: u32,
) -> Replay {
    match origin {
        Origin::Orbit { .. } => {
            let Some(admin) = admin else {
                return Replay::Failed("no admin client".to_owned());
            };
            match admin.add_budget(&f.id, add).await {
                Ok(delivery) => Replay::Replayed(Some(format!(
                    "state={} budget={}",
                    delivery.state, delivery.budget
                ))),
                Err(e) if e.is_code("delivery_already_acked") => {
                    Replay::Skipped("acknowledged meanwhile".to_owned())
                }
                Err(
                    e @ (OrbitError::Status {
                        status: 401 | 403, ..
                    }
                    | OrbitError::MissingScope { .. }),
                ) => Replay::TokenRefused(format!("the admin token was refused ({e})")),
                // Orbit's answers name Orbit already.
                Err(e @ OrbitError::Config(_)) => Replay::Failed(format!("Orbit client: {e}")),
                Err(e) => Replay::Failed(e.to_string()),
            }
        }
        #[cfg(feature = "nats")]
        Origin::Nats(settings) => {
            let Some(message) = &f.message else {
                return Replay::Failed("no stored message".to_owned());
            };
            match nats::replay(settings, crate::commands::BROKER_CALL_TIMEOUT, message).await {
                Ok(sequence) => Replay::Replayed(Some(format!("new_sequence={sequence}"))),
                Err(e) => Replay::Failed(format!("NATS: {e}")),
            }
        }
        #[cfg(feature = "rabbitmq")]
        Origin::Rabbitmq(_) => {
            Replay::Failed("not brought back in the dead-letter queue's pass".to_owned())
        }
    }
}
