//! What tests and benches measure, written once: percentiles, and a process's memory
//! and CPU time from `/proc`. A leaf (nothing else of `support`), so a bench that needs
//! no cluster includes it alone with `#[path]`.
#![allow(dead_code)] // each test and bench binary uses a different part of this module

/// The nearest-rank percentile of `sorted` (ascending): the smallest value with at least
/// `p` percent of the values at or below it; the first value for `p` = 0. `None` for no
/// values: there is no figure then, and each report says so its own way (a dash, `null`
/// in results.json).
pub fn percentile<T: Copy>(sorted: &[T], p: f64) -> Option<T> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// A memory line of `/proc/<pid>/status` (`field` with its colon: `VmHWM:`), in KiB.
pub fn status_kib(status: &str, field: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The process's `/proc/<pid>/status`, to read several lines of one moment.
pub fn read_status(pid: u32) -> Result<String, String> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| format!("reading /proc/{pid}/status: {e}"))
}

/// `field` of the process's `/proc/<pid>/status` now, in KiB (`VmRSS:`, `RssAnon:`, ...).
pub fn memory_kib(pid: u32, field: &str) -> Result<u64, String> {
    status_kib(&read_status(pid)?, field).ok_or_else(|| format!("no {field} in /proc/{pid}/status"))
}

/// The process's peak resident set so far (`VmHWM`), in KiB.
pub fn peak_rss_kib(pid: u32) -> Result<u64, String> {
    memory_kib(pid, "VmHWM:")
}

/// The fields of a `/proc/<pid>/stat` line after the command name, from field 3 (the
/// state) on. The name (field 2) may hold spaces and parentheses, so the fields start
/// after its last closing parenthesis.
fn stat_fields_after_command(stat: &str) -> Option<Vec<&str>> {
    let rest = &stat[stat.rfind(')')? + 1..];
    Some(rest.split_whitespace().collect())
}

/// The state letter of a `/proc/<pid>/stat` line (`R`, `S`, `Z` for a zombie, ...).
pub fn stat_state(stat: &str) -> Option<char> {
    stat_fields_after_command(stat)?.first()?.chars().next()
}

/// utime + stime of a `/proc/<pid>/stat` line (fields 14 and 15), in clock ticks.
pub fn stat_cpu_ticks(stat: &str) -> Option<u64> {
    let fields = stat_fields_after_command(stat)?;
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// Clock ticks per second, the unit of `/proc/<pid>/stat`'s CPU times (USER_HZ): the
/// kernel's own answer, not an assumed 100.
pub fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf reads a constant of the system and touches no memory of ours.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(ticks)
        .ok()
        .filter(|t| *t > 0)
        .expect("sysconf(_SC_CLK_TCK) answers a positive tick rate")
}

/// CPU seconds (user + system) the process has used so far.
pub fn cpu_seconds(pid: u32) -> Result<f64, String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_err(|e| format!("reading /proc/{pid}/stat: {e}"))?;
    let ticks =
        stat_cpu_ticks(&stat).ok_or_else(|| format!("cannot parse /proc/{pid}/stat: {stat:?}"))?;
    Ok(ticks as f64 / clock_ticks_per_second() as f64)
}

#[cfg(test)]
mod tests {
    // Paths in full: bench targets compile this module without its #[test] functions.
    #[test]
    fn percentile_is_the_nearest_rank_and_none_without_values() {
        let values = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(super::percentile(&values, 0.0), Some(1.0));
        assert_eq!(super::percentile(&values, 25.0), Some(1.0));
        assert_eq!(super::percentile(&values, 50.0), Some(2.0));
        assert_eq!(super::percentile(&values, 51.0), Some(3.0));
        assert_eq!(super::percentile(&values, 99.0), Some(4.0));
        assert_eq!(super::percentile(&values, 100.0), Some(4.0));
        assert_eq!(super::percentile(&[7_u64], 50.0), Some(7));
        assert_eq!(super::percentile::<f64>(&[], 50.0), None);
    }

    #[test]
    fn memory_lines_are_read_in_kib() {
        let status = "Name:\trollgate\nVmHWM:\t   51234 kB\nVmRSS:\t   40960 kB\n";
        assert_eq!(super::status_kib(status, "VmHWM:"), Some(51234));
        assert_eq!(super::status_kib(status, "VmRSS:"), Some(40960));
        assert_eq!(super::status_kib(status, "RssAnon:"), None);
        let own = super::peak_rss_kib(std::process::id()).unwrap();
        assert!(own > 0, "this test's own peak RSS: {own} KiB");
    }

    #[test]
    fn cpu_ticks_and_state_are_read_after_the_command_name() {
        // The command name may hold spaces and a parenthesis: utime 250 + stime 50 ticks.
        let stat =
            "4242 (rollgate (x) y) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 5 0 100";
        assert_eq!(super::stat_cpu_ticks(stat), Some(300));
        assert_eq!(super::stat_state(stat), Some('S'));
        assert_eq!(super::stat_cpu_ticks("4242 (rollgate) S 1"), None);
        assert_eq!(super::stat_cpu_ticks("no parenthesis"), None);
        assert_eq!(super::stat_state("4242 (rollgate) Z 1"), Some('Z'));
    }

    #[test]
    fn cpu_time_is_in_the_kernels_clock_ticks() {
        // The same answer as the system's own tool (100 on every common Linux).
        let getconf = std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output();
        if let Some(out) = getconf.ok().filter(|out| out.status.success()) {
            let said = String::from_utf8_lossy(&out.stdout).trim().to_string();
            assert_eq!(super::clock_ticks_per_second().to_string(), said);
        }
        let own = super::cpu_seconds(std::process::id()).unwrap();
        assert!(own >= 0.0, "this test's own CPU time: {own} s");
    }
}
