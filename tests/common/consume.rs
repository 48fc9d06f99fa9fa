//! A `receiver consume` process, as an operator would run it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command};

use result_inbox::ids::SubscriptionId;

use super::orbit::{receiver, OrbitDev, QueueCredentials};
use super::{random_hex, sigterm};

/// A `receiver consume` process whose output goes to files; killed if still
/// running when dropped.
pub struct Consume {
    pub child: Child,
    stdout: PathBuf,
    stderr: PathBuf,
}

impl Consume {
    pub fn start(
        orbit: &OrbitDev,
        creds: &QueueCredentials,
        dsn: &str,
        sub: &SubscriptionId,
        name: &str,
        extra: &[(&str, &str)],
    ) -> Consume {
        let mut command = receiver();
        command
            .arg("consume")
            .env("ORBIT_CREDENTIALS_FILE", &creds.file)
            .env("ORBIT_SUBSCRIPTION_ID", sub.as_str())
            .env("ORBIT_RECEIVER_DSN", dsn)
            .env("RECEIVER_NAME", name)
            .envs(extra.iter().copied());
        Consume::spawn(command, &orbit.dir)
    }

    /// `receiver consume` with exactly this environment (besides the
    /// inherited one), its output in files under `dir`.
    pub fn with_env(dir: &Path, env: &[(String, String)]) -> Consume {
        let mut command = receiver();
        command.arg("consume").envs(env.iter().map(|(k, v)| (k, v)));
        Consume::spawn(command, dir)
    }

    /// `receiver relay` with exactly this environment (besides the
    /// inherited one), its output in files under `dir`.
    pub fn relay(dir: &Path, env: &[(&str, &str)]) -> Consume {
        let mut command = receiver();
        command.arg("relay").envs(env.iter().copied());
        Consume::spawn(command, dir)
    }

    fn spawn(mut command: Command, dir: &Path) -> Consume {
        let tag = random_hex(4);
        let stdout = dir.join(format!("consume-{tag}.out"));
        let stderr = dir.join(format!("consume-{tag}.err"));
        let child = command
            .stdout(std::fs::File::create(&stdout).unwrap())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .unwrap();
        Consume {
            child,
            stdout,
            stderr,
        }
    }

    /// SIGKILL: the process ends at once, whatever it was doing.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// `receiver consume` with the default receiver name on a test
    /// database, as most tests run it.
    pub fn on_test_db(
        orbit: &OrbitDev,
        creds: &QueueCredentials,
        db: &super::TestDb,
        sub: &SubscriptionId,
        extra: &[(&str, &str)],
    ) -> Consume {
        let dsn = super::dsn_for(&db.name);
        Consume::start(orbit, creds, &dsn, sub, "task-result-view", extra)
    }

    /// SIGTERM, as a service manager would send it; waits for the exit.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        sigterm(self.child.id());
        self.child.wait().unwrap()
    }

    /// Everything it printed so far.
    pub fn output(&self) -> String {
        std::fs::read_to_string(&self.stdout).unwrap()
            + &std::fs::read_to_string(&self.stderr).unwrap()
    }

    /// Waits until its output satisfies `done`, or panics with the output
    /// after `limit`.
    pub async fn wait_for_output(&self, limit: std::time::Duration, done: impl Fn(&str) -> bool) {
        let deadline = tokio::time::Instant::now() + limit;
        while !done(&self.output()) {
            assert!(tokio::time::Instant::now() < deadline, "{}", self.output());
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    /// Waits for it to exit on its own, or panics with its output after
    /// `limit`.
    pub fn wait_exit(&mut self, limit: std::time::Duration) -> std::process::ExitStatus {
        let deadline = std::time::Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "still running: {}",
                self.output()
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// Whether it is still running.
    pub fn running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// The base URL of its metrics endpoint (started with
    /// `RECEIVER_METRICS_ADDR=127.0.0.1:0`), read from its log.
    pub async fn metrics_url(&self) -> String {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let out = self.output();
            if let Some(addr) = out
                .lines()
                .find(|l| l.contains("metrics endpoint listening"))
                .and_then(|l| l.split("addr=").nth(1))
                .and_then(|rest| rest.split_whitespace().next())
            {
                return format!("http://{addr}");
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no metrics endpoint: {out}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    /// How many deliveries the inbox reported handling.
    pub fn handled(&self) -> usize {
        self.output()
            .matches("result_inbox::inbox: delivery")
            .count()
    }
}

impl Drop for Consume {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
