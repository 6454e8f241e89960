//! The process metrics: the client library's collector, with `process_cpu_seconds_total`
//! read in clock ticks (1/100 s) instead of its whole seconds, which leave an agent's slow
//! trickle of CPU at 0 for minutes.
use prometheus::{
    core::{Collector, Desc},
    process_collector::ProcessCollector,
    proto::{Counter, MetricFamily},
};

const CPU_SECONDS: &str = "process_cpu_seconds_total";

pub struct ProcessMetrics {
    inner: ProcessCollector,
}

impl ProcessMetrics {
    pub fn for_self() -> Self {
        Self {
            inner: ProcessCollector::for_self(),
        }
    }
}

impl Collector for ProcessMetrics {
    fn desc(&self) -> Vec<&Desc> {
        self.inner.desc()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let mut families = self.inner.collect();
        if let Some(seconds) = cpu_seconds() {
            for metric in families
                .iter_mut()
                .filter(|f| f.name() == CPU_SECONDS)
                .flat_map(|f| f.mut_metric().iter_mut())
            {
                let mut counter = Counter::default();
                counter.set_value(seconds);
                metric.set_counter(counter);
            }
        }
        families
    }
}

/// User plus system CPU time of this process, from /proc/self/stat's utime and stime ticks.
pub fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let ticks = stat_cpu_ticks(&stat)?;
    // SAFETY: sysconf only reads a system constant.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (per_second > 0).then(|| ticks as f64 / per_second as f64)
}

/// utime + stime (fields 14 and 15) of a /proc/PID/stat line. The comm (field 2) may hold
/// spaces and parentheses: fields are counted after its last `)`.
fn stat_cpu_ticks(stat: &str) -> Option<u64> {
    let after_comm = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_comm.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_counted_after_the_last_parenthesis_of_comm() {
        let stat = "42 (a) b (c) S 1 42 42 0 -1 4194560 100 0 0 0 250 31 0 0 20 0 1 0 7 0 0";
        assert_eq!(stat_cpu_ticks(stat), Some(281));
    }

    #[test]
    fn a_truncated_line_has_no_ticks() {
        assert_eq!(stat_cpu_ticks("42 (a) S 1 42"), None);
    }

    #[test]
    fn cpu_seconds_move_within_a_second_of_work() {
        let before = cpu_seconds().expect("/proc/self/stat");
        let start = std::time::Instant::now();
        let mut x = 0u64;
        let mut now = before;
        while now - before < 0.02 && start.elapsed() < std::time::Duration::from_secs(1) {
            for _ in 0..100_000 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
            }
            now = cpu_seconds().expect("/proc/self/stat");
        }
        assert!(
            now - before >= 0.02,
            "{before} -> {now} after {:?}",
            start.elapsed()
        );
    }

    #[test]
    fn the_collector_reports_the_fine_cpu_time() {
        let before = cpu_seconds().expect("/proc/self/stat");
        let families = ProcessMetrics::for_self().collect();
        let after = cpu_seconds().expect("/proc/self/stat");
        let cpu = families
            .iter()
            .find(|f| f.name() == CPU_SECONDS)
            .expect(CPU_SECONDS);
        let value = cpu.get_metric()[0].get_counter().get_value();
        assert!(
            before <= value && value <= after,
            "{before} <= {value} <= {after}"
        );
    }
}
