//! The consumer: drains every thread's ring and keeps the events.

use weft_live::{EventRecord, Session};

/// Events drained so far.
#[derive(Debug, Default)]
pub struct Collector {
    /// In each thread's order.
    pub events: Vec<EventRecord>,
}

impl Collector {
    /// Drains every ring now.
    pub fn drain(&mut self, session: &Session) {
        session.drain_events(&mut self.events);
    }
}
