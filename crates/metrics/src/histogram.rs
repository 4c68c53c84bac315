//! Time histograms (Paradyn): a fixed number of buckets of equal width;
//! when time runs past the last bucket, the width doubles and each pair of
//! neighbouring buckets merges into one, so the total is preserved.

/// Increments of a metric over successive intervals.
#[derive(Debug, Clone, PartialEq)]
pub struct TimeHistogram {
    bucket_ns: u64,
    values: Vec<f64>,
    capacity: usize,
}

impl TimeHistogram {
    /// `capacity` buckets of `bucket_ns` each (both at least 1; capacity even).
    pub fn new(bucket_ns: u64, capacity: usize) -> TimeHistogram {
        let capacity = capacity.max(2).next_multiple_of(2);
        TimeHistogram {
            bucket_ns: bucket_ns.max(1),
            values: Vec::new(),
            capacity,
        }
    }

    /// A histogram holding given bucket values.
    pub fn from_values(bucket_ns: u64, capacity: usize, values: Vec<f64>) -> TimeHistogram {
        let mut h = TimeHistogram::new(bucket_ns, capacity);
        h.values = values;
        h
    }

    /// Adds `delta` at `at_ns` after the start.
    pub fn add(&mut self, at_ns: u64, delta: f64) {
        let mut index = (at_ns / self.bucket_ns) as usize;
        while index >= self.capacity {
            self.double();
            index = (at_ns / self.bucket_ns) as usize;
        }
        if self.values.len() <= index {
            self.values.resize(index + 1, 0.0);
        }
        self.values[index] += delta;
    }

    /// Adds `delta`, accrued evenly between `from_ns` and `to_ns`, to the
    /// buckets that interval overlaps (a late sample does not pile an
    /// interval's worth of increments into one bucket).
    pub fn add_interval(&mut self, from_ns: u64, to_ns: u64, delta: f64) {
        if to_ns <= from_ns {
            self.add(to_ns, delta);
            return;
        }
        // Make room for the end first, so the bucket width is final.
        self.add(to_ns, 0.0);
        let span = (to_ns - from_ns) as f64;
        let mut at = from_ns;
        while at < to_ns {
            let bucket_end = (at / self.bucket_ns + 1) * self.bucket_ns;
            let until = bucket_end.min(to_ns);
            self.add(at, delta * (until - at) as f64 / span);
            at = until;
        }
    }

    fn double(&mut self) {
        self.bucket_ns *= 2;
        self.values = self.values.chunks(2).map(|p| p.iter().sum()).collect();
    }

    /// The current bucket width.
    pub fn bucket_ns(&self) -> u64 {
        self.bucket_ns
    }

    /// The buckets filled so far.
    pub fn values(&self) -> &[f64] {
        &self.values
    }

    /// The sum of all buckets.
    pub fn total(&self) -> f64 {
        self.values.iter().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubling_preserves_the_total_and_the_timeline() {
        let mut h = TimeHistogram::new(10, 4);
        for t in 0..40 {
            h.add(t, 1.0);
        }
        assert_eq!(
            (h.bucket_ns(), h.values()),
            (10, &[10.0, 10.0, 10.0, 10.0][..])
        );
        h.add(45, 5.0); // past the 4th bucket: width doubles
        assert_eq!(h.bucket_ns(), 20);
        assert_eq!(h.values(), &[20.0, 20.0, 5.0]);
        h.add(1000, 1.0); // far past: doubles until it fits
        assert_eq!(h.bucket_ns(), 320);
        assert!(h.values().len() <= 4);
        assert_eq!(h.total(), 46.0);
        assert_eq!(
            h.values()[0],
            45.0,
            "everything before 320 ns is in the first bucket"
        );
    }

    #[test]
    fn interval_increments_are_spread_over_their_buckets() {
        let mut h = TimeHistogram::new(10, 100);
        h.add_interval(5, 35, 30.0);
        assert_eq!(h.values(), &[5.0, 10.0, 10.0, 5.0]);
        assert_eq!(h.total(), 30.0);
    }
}
