//! `receiver outbox`: the effects waiting to be sent or given up on, one
//! line each and a summary; `receiver outbox replay` brings dead ones back
//! under their own ids.

use clap::{Args, Subcommand};
use serde_json::json;

use result_inbox::outbox::{self, EffectId, Listed, OutboxError};

use crate::args::{required_dsn, DatabaseArgs};
use crate::exit::{config, database_failure, failed, printed, Failed, Outcome};
use crate::runtime::runtime;

/// What `outbox` is given.
#[derive(Args)]
pub(crate) struct OutboxArgs {
    #[command(flatten)]
    database: DatabaseArgs,
    /// One JSON object instead of key=value lines.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    action: Option<OutboxAction>,
}

/// What `outbox` does besides listing.
#[derive(Subcommand)]
pub(crate) enum OutboxAction {
    /// Bring dead effects back to pending, under the same id
    ///
    /// The relay then sends each again, with the same webhook-id and
    /// Idempotency-Key. Needs SELECT and UPDATE on receiver_outbox.
    Replay {
        /// The dead effect to bring back (32 lowercase hex characters).
        #[arg(long, required_unless_present = "all", conflicts_with = "all")]
        effect: Option<String>,
        /// Every dead effect.
        #[arg(long)]
        all: bool,
        /// Only list what would be brought back.
        #[arg(long)]
        dry_run: bool,
    },
}

pub(crate) fn run_outbox(args: OutboxArgs) -> Outcome {
    let dsn = required_dsn(args.database.dsn).map_err(config)?;
    match args.action {
        None => {
            let effects = runtime()
                .block_on(outbox::effects(&dsn))
                .map_err(|e| outbox_failure("outbox", e, |_| "SELECT"))?;
            print_effects(&effects, args.json)
        }
        Some(OutboxAction::Replay {
            effect,
            all: _,
            dry_run,
        }) => {
            let effect = effect
                .map(|id| {
                    EffectId::parse(&id).ok_or_else(|| {
                        config("--effect: an effect id is 32 lowercase hex characters")
                    })
                })
                .transpose()?;
            let replayed = runtime()
                .block_on(outbox::replay(&dsn, effect.as_ref(), dry_run))
                .map_err(|e| outbox_failure("outbox replay", e, |_| "SELECT, UPDATE"))?;
            print_replayed(&replayed, effect.as_ref(), dry_run, args.json)
        }
    }
}

fn outbox_failure(what: &str, e: OutboxError, grants: fn(&str) -> &'static str) -> Failed {
    match e {
        OutboxError::Database(e) => database_failure(what, e, grants),
        e => failed(false, format!("{what}: {e}")),
    }
}

/// A value as a `key=value` line shows it: quoted where it holds a space,
/// a quote or an `=`.
fn shown(value: &str) -> String {
    if value.is_empty() || value.contains([' ', '"', '=']) {
        format!("{value:?}")
    } else {
        value.to_owned()
    }
}

fn line(l: &Listed) -> String {
    format!(
        "effect={} target={} key={} state={} attempts={} last={} age_s={}",
        l.id,
        shown(&l.target),
        shown(&l.key),
        l.state,
        l.attempts,
        l.last_result
            .as_deref()
            .map_or_else(|| "-".to_owned(), shown),
        l.age_seconds
    )
}

fn object(l: &Listed) -> serde_json::Value {
    json!({
        "effect": l.id,
        "event": l.event,
        "target": l.target,
        "key": l.key,
        "ordering_key": l.ordering_key,
        "state": l.state,
        "attempts": l.attempts,
        "last": l.last_result,
        "created_at": l.created_at,
        "next_attempt_at": l.next_attempt_at,
        "age_s": l.age_seconds,
    })
}

fn print_effects(effects: &[Listed], as_json: bool) -> Outcome {
    let pending = effects.iter().filter(|l| l.state == "pending").count();
    let dead = effects.len() - pending;
    let oldest = effects
        .iter()
        .filter(|l| l.state == "pending")
        .map(|l| l.age_seconds)
        .max();
    if as_json {
        return printed(json!({
            "effects": effects.iter().map(object).collect::<Vec<_>>(),
            "pending": pending,
            "dead": dead,
            "oldest_pending_age_s": oldest,
        }));
    }
    let mut lines: Vec<String> = effects.iter().map(line).collect();
    lines.push(format!(
        "outbox pending={pending} dead={dead} oldest_pending_age_s={}",
        oldest.map_or_else(|| "-".to_owned(), |s| s.to_string())
    ));
    printed(lines.join("\n"))
}

fn print_replayed(
    replayed: &outbox::Replayed,
    effect: Option<&EffectId>,
    dry_run: bool,
    as_json: bool,
) -> Outcome {
    let result = if dry_run { "would_replay" } else { "replayed" };
    if let (Some(id), true) = (effect, replayed.dead.is_empty()) {
        return Err(failed(
            false,
            format!("outbox replay: effect {id} is not dead (pending, sent or not recorded): nothing to replay"),
        ));
    }
    if as_json {
        return printed(json!({
            "effects": replayed.dead.iter().map(|l| json!({"effect": l.id, "result": result})).collect::<Vec<_>>(),
            "replayed": replayed.replayed,
            "dry_run": dry_run,
        }));
    }
    let mut lines: Vec<String> = replayed
        .dead
        .iter()
        .map(|l| {
            format!(
                "effect={} target={} result={result}",
                l.id,
                shown(&l.target)
            )
        })
        .collect();
    lines.push(format!(
        "outbox replay dead={} replayed={} dry_run={dry_run}",
        replayed.dead.len(),
        replayed.replayed
    ));
    printed(lines.join("\n"))
}
