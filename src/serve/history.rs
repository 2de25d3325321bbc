//! The last hour of each GPU's readings, for the dashboard's sparklines, and the last tick's
//! duration, for `/metrics`. State keeps only ten minutes of GPU history (what the scheduler's
//! window needs), so the server reads the published log itself, each record once
//! ([`crate::view::read_new`]), and keeps what falls in the hour.

use std::collections::{BTreeMap, VecDeque};

use crate::error::Result;
use crate::home::Home;
use crate::journal::Event;
use crate::view::{self, Cursor};

/// How far back the sparklines reach.
pub const HISTORY_MS: u64 = 60 * 60 * 1000;

/// One reading of one GPU.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    /// When the tick sampled it (its MetricSample record's time), Unix ms.
    pub time_ms: u64,
    /// Memory in use, MiB.
    pub used_mib: u64,
    /// Total memory, MiB.
    pub total_mib: u64,
    /// SM activity, 0 to 1; `None` when the GPU could not say.
    pub sm_active: Option<f32>,
}

/// What the server derived from the log so far.
#[derive(Debug, Default)]
pub struct History {
    cursor: Cursor,
    /// Readings per GPU UUID, oldest first, within [`HISTORY_MS`] of the newest one.
    pub gpus: BTreeMap<String, VecDeque<Point>>,
    /// The last TickCompleted's duration, µs.
    pub tick_duration_us: Option<u64>,
}

impl History {
    /// Reads what was published since the last call; starts over when the view was rebuilt.
    pub fn refresh(&mut self, home: &Home) -> Result<()> {
        if !self.read(home)? {
            *self = History::default();
            self.read(home)?;
        }
        Ok(())
    }

    fn read(&mut self, home: &Home) -> Result<bool> {
        let mut cursor = self.cursor;
        let read = view::read_new(home, &mut cursor, |_, record| self.fold(record.time_ms, &record.event))?;
        self.cursor = cursor;
        Ok(read)
    }

    fn fold(&mut self, time_ms: u64, event: &Event) {
        match event {
            Event::MetricSample { sample } => {
                let points = self.gpus.entry(sample.uuid.clone()).or_default();
                points.push_back(Point {
                    time_ms,
                    used_mib: sample.memory_used_mib,
                    total_mib: sample.memory_total_mib,
                    sm_active: sample.sm_active,
                });
                while points.front().is_some_and(|p| p.time_ms + HISTORY_MS < time_ms) {
                    points.pop_front();
                }
            }
            Event::TickCompleted { duration_us, .. } => self.tick_duration_us = Some(*duration_us),
            _ => {}
        }
    }
}
