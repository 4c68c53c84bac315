//! Reading a thread's stream record by record, with the byte offset
//! every error names.

use super::RegenError;
use crate::record::{self, Record};

pub(super) struct Reader<'b> {
    pub(super) bytes: &'b [u8],
    pub(super) at: usize,
}

impl Reader<'_> {
    /// The next record, blocks' included.
    pub(super) fn peek_raw(&self) -> Result<Option<Record>, RegenError> {
        match record::read(self.bytes, self.at) {
            Ok(Some((rec, _))) => Ok(Some(rec)),
            Ok(None) => self.ended(self.at),
            Err(bad) => Err(self.error(bad.to_string())),
        }
    }

    /// The stream ends at `at` (a 0 where a record would start): truly,
    /// or at a record its thread reserved and never wrote, if records
    /// follow.
    pub(super) fn ended(&self, at: usize) -> Result<Option<Record>, RegenError> {
        match self
            .bytes
            .get(at..)
            .unwrap_or(&[])
            .iter()
            .position(|&b| b != 0)
        {
            None => Ok(None),
            Some(gap) => Err(RegenError {
                offset: at,
                what: format!(
                    "{gap} byte(s) of a record were reserved and never written (its thread \
                     left a signal handler by longjmp, or was killed, in between)"
                ),
            }),
        }
    }

    /// The next record that is not a block's (`--validate`) or a
    /// register's value (`--data`): those of the blocks along an edge
    /// without a witness come before the witness that decides.
    pub(super) fn peek_past_blocks(&self) -> Result<Option<Record>, RegenError> {
        let mut at = self.at;
        loop {
            match record::read(self.bytes, at) {
                Ok(Some((Record::Block(_) | Record::Value(_), n))) => at += n,
                Ok(Some((rec, _))) => return Ok(Some(rec)),
                Ok(None) => return self.ended(at),
                Err(bad) => {
                    return Err(RegenError {
                        offset: at,
                        what: bad.to_string(),
                    })
                }
            }
        }
    }

    pub(super) fn next(&mut self) -> Result<Option<Record>, RegenError> {
        match record::read(self.bytes, self.at) {
            Ok(Some((rec, n))) => {
                self.at += n;
                Ok(Some(rec))
            }
            Ok(None) => self.ended(self.at),
            Err(bad) => Err(self.error(bad.to_string())),
        }
    }

    /// A register's value (`--data`), which the plan says comes next.
    pub(super) fn value(&mut self) -> Result<u64, RegenError> {
        match self.next()? {
            Some(Record::Value(v)) => Ok(v),
            other => Err(self.error(format!(
                "{} where a register's value was recorded",
                record::describe(other)
            ))),
        }
    }

    pub(super) fn error(&self, what: String) -> RegenError {
        RegenError {
            offset: self.at,
            what,
        }
    }
}
