//! Deflating batches of packets on another core while the next ones are
//! encoded: deflate is a sixth of writing a large trace's protobuf.
//!
//! One helper thread deflates the batches in the order they come and hands
//! them back in that order; the writer writes each when it comes back, so
//! the file is byte for byte what deflating in place gives. At most
//! [`IN_FLIGHT`] batches are out at a time. On one core, batches are
//! deflated in place.

use flate2::write::ZlibEncoder;
use flate2::Compression;
use std::collections::VecDeque;
use std::io::{self, Write};
use std::sync::mpsc::{channel, Receiver, Sender};

/// Batches handed out and not yet written, at most.
const IN_FLIGHT: usize = 4;

/// Deflates one batch with the level the file uses.
pub fn deflate(batch: &[u8], into: Vec<u8>) -> io::Result<Vec<u8>> {
    let mut encoder = ZlibEncoder::new(into, Compression::fast());
    encoder.write_all(batch)?;
    encoder.finish()
}

/// The helper thread, and the batches it has.
pub struct Deflater {
    to_helper: Option<Sender<Vec<u8>>>,
    from_helper: Receiver<io::Result<(Vec<u8>, Vec<u8>)>>,
    /// Batches handed out whose deflated bytes have not come back.
    out: usize,
    /// Emptied batches, for the next ones to be gathered in.
    spare: VecDeque<Vec<u8>>,
}

impl Deflater {
    /// A helper thread, where the machine has another core; `None` where
    /// it has one, or no thread could be started.
    pub fn start() -> Option<Deflater> {
        if cudatrace_analysis::helper_threads() == 0 {
            return None;
        }
        let (to_helper, batches) = channel::<Vec<u8>>();
        let (done, from_helper) = channel();
        std::thread::Builder::new()
            .name("deflate".into())
            .spawn(move || {
                let mut spare = Vec::new();
                for batch in batches {
                    let deflated = deflate(&batch, std::mem::take(&mut spare)).map(|bytes| (bytes, batch));
                    if done.send(deflated).is_err() {
                        return;
                    }
                }
            })
            .ok()?;
        Some(Deflater {
            to_helper: Some(to_helper),
            from_helper,
            out: 0,
            spare: VecDeque::new(),
        })
    }

    /// Hands `batch` out; returns an empty batch to gather the next in, and
    /// writes to `write` each batch that came back deflated, in order,
    /// while too many are out.
    pub fn hand_out(&mut self, batch: Vec<u8>, write: &mut impl FnMut(&[u8]) -> io::Result<()>) -> io::Result<Vec<u8>> {
        while self.out >= IN_FLIGHT {
            self.take_back(write)?;
        }
        let sender = self.to_helper.as_ref().ok_or_else(gone)?;
        sender.send(batch).map_err(|_| gone())?;
        self.out += 1;
        let mut next = self.spare.pop_front().unwrap_or_default();
        next.clear();
        Ok(next)
    }

    /// Writes every batch still out, in order.
    pub fn finish(&mut self, write: &mut impl FnMut(&[u8]) -> io::Result<()>) -> io::Result<()> {
        while self.out > 0 {
            self.take_back(write)?;
        }
        Ok(())
    }

    fn take_back(&mut self, write: &mut impl FnMut(&[u8]) -> io::Result<()>) -> io::Result<()> {
        let (deflated, batch) = self.from_helper.recv().map_err(|_| gone())??;
        self.out -= 1;
        write(&deflated)?;
        self.spare.push_back(batch);
        Ok(())
    }
}

impl Drop for Deflater {
    fn drop(&mut self) {
        // The helper ends when no more batches can come.
        self.to_helper.take();
    }
}

fn gone() -> io::Error {
    io::Error::other("the thread deflating the packets ended")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_come_back_deflated_in_the_order_they_went() {
        let Some(mut deflater) = Deflater::start() else {
            // One core: nothing to hand out to.
            return;
        };
        let batches: Vec<Vec<u8>> = (0..3 * IN_FLIGHT as u8)
            .map(|n| (0..10_000u32).map(|i| (i % 251) as u8 ^ n).collect())
            .collect();
        let mut written: Vec<Vec<u8>> = Vec::new();
        let mut write = |bytes: &[u8]| {
            written.push(bytes.to_vec());
            Ok(())
        };
        for batch in &batches {
            let empty = deflater.hand_out(batch.clone(), &mut write).unwrap();
            assert!(empty.is_empty());
        }
        deflater.finish(&mut write).unwrap();
        let expected: Vec<Vec<u8>> = batches.iter().map(|b| deflate(b, Vec::new()).unwrap()).collect();
        assert_eq!(written, expected);
    }
}
