//! What the server a store writes to says of its standbys: whether a
//! COMMIT it confirms is on a standby too, or only on itself.
//!
//! A failover promotes a standby. What the old primary committed and no
//! standby had yet is rewound when it rejoins, although the receiver was
//! told of the COMMIT and so acknowledged the delivery: lost without any
//! fault of the receiver's. That can happen only while the server commits
//! without waiting for a synchronous standby, which a two-node
//! pg_auto_failover formation does on purpose when its standby is
//! unhealthy (`wait_primary`), so that writes go on. The receiver cannot
//! prevent it; it says so while it lasts.

use std::fmt;

/// The replication of the server a store writes to, as that server reports
/// it (`pg_stat_replication`, `pg_replication_slots`,
/// `synchronous_standby_names`, `synchronous_commit`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replication {
    /// Standbys streaming from the server now.
    pub standbys: u64,
    /// Of them, those a COMMIT waits for (`sync` or `quorum`); `None` when
    /// the account may not see their state (it needs `pg_read_all_stats`),
    /// and then every streaming standby is taken for one if the server is
    /// set to wait for any.
    pub synchronous: Option<u64>,
    /// Physical replication slots: standbys the server keeps WAL for,
    /// connected or not.
    pub slots: u64,
    /// Whether the server is set to wait for standbys at COMMIT
    /// (`synchronous_standby_names` is set and `synchronous_commit` is
    /// neither `off` nor `local`).
    pub commit_waits: bool,
}

impl Replication {
    /// Whether the server has standbys at all (streaming, kept by a slot,
    /// or waited for): `false` for a single server, of which nothing is
    /// said.
    pub fn is_replicated(&self) -> bool {
        self.standbys > 0 || self.slots > 0 || self.commit_waits
    }

    /// The standbys a COMMIT waits for now, as far as the account can see.
    pub fn synchronous_standbys(&self) -> u64 {
        if !self.commit_waits {
            return 0;
        }
        self.synchronous.unwrap_or(self.standbys)
    }

    /// Whether a COMMIT the server confirms is on a standby too, so that a
    /// failover to it loses nothing the receiver acknowledged.
    pub fn is_synchronous(&self) -> bool {
        self.synchronous_standbys() > 0
    }
}

impl fmt::Display for Replication {
    /// `synchronous_standbys=1 standbys=1`, then why a COMMIT is not safe
    /// from a failover where it is not.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "synchronous_standbys={} standbys={}",
            self.synchronous_standbys(),
            self.standbys
        )?;
        if self.is_synchronous() {
            return Ok(());
        }
        let why = if !self.commit_waits {
            "the server commits without waiting for any standby (synchronous_standby_names is empty or synchronous_commit is off or local)"
        } else {
            "no standby the server waits for is streaming"
        };
        write!(
            f,
            ": {why}; a failover now can lose commits the receiver was told of and acknowledged"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replication(
        standbys: u64,
        synchronous: Option<u64>,
        slots: u64,
        waits: bool,
    ) -> Replication {
        Replication {
            standbys,
            synchronous,
            slots,
            commit_waits: waits,
        }
    }

    #[test]
    fn a_single_server_is_not_replicated() {
        assert!(!replication(0, Some(0), 0, false).is_replicated());
    }

    #[test]
    fn a_primary_that_waits_for_a_streaming_synchronous_standby_is_synchronous() {
        let r = replication(1, Some(1), 1, true);
        assert!(r.is_replicated() && r.is_synchronous());
        assert_eq!(r.to_string(), "synchronous_standbys=1 standbys=1");
    }

    #[test]
    fn a_primary_that_stopped_waiting_is_not_synchronous_and_says_what_it_risks() {
        let r = replication(1, Some(0), 1, false);
        assert!(r.is_replicated() && !r.is_synchronous());
        assert!(
            r.to_string().contains("synchronous_standby_names is empty"),
            "{r}"
        );
        assert!(r.to_string().contains("can lose commits"), "{r}");
    }

    #[test]
    fn a_primary_whose_standby_is_gone_but_kept_by_its_slot_is_not_synchronous() {
        let r = replication(0, Some(0), 1, true);
        assert!(r.is_replicated() && !r.is_synchronous());
        assert!(
            r.to_string().contains("no standby the server waits for"),
            "{r}"
        );
    }

    #[test]
    fn a_standby_state_the_account_cannot_see_counts_if_the_server_waits() {
        assert!(replication(2, None, 2, true).is_synchronous());
        assert!(!replication(2, None, 2, false).is_synchronous());
    }
}
