//! Building programs in code (for generators and tests): every rank gets the same declarations, ops are pushed per
//! (rank, thread). Names are resolved by the caller; the builder only assembles a [`Program`].

use crate::program::*;

/// Assembles a program whose ranks share declarations (SPMD): stream 0 is the legacy default stream `sL`.
pub struct Builder {
    program: Program,
}

impl Builder {
    /// `ranks` ranks with one host thread `main` each, and the world communicator (pre-initialized) as comm 0.
    pub fn new(name: &str, ranks: u32) -> Builder {
        let rank = Rank {
            streams: vec![Stream { name: "sL".into(), kind: StreamKind::LegacyDefault }],
            events: vec![],
            buffers: vec![],
            threads: vec![Thread { name: "main".into(), ops: vec![] }],
        };
        Builder {
            program: Program {
                name: name.into(),
                ranks: vec![rank; ranks as usize],
                comms: vec![Comm { name: "world".into(), members: (0..ranks).collect(), explicit_init: false, nonblocking: false, watchdog_ns: None }],
                barriers: vec![],
                uses_torch: false,
            },
        }
    }

    /// Declares a stream on every rank; returns its index.
    pub fn stream(&mut self, name: &str, kind: StreamKind) -> u32 {
        for r in &mut self.program.ranks {
            r.streams.push(Stream { name: name.into(), kind });
        }
        self.program.ranks[0].streams.len() as u32 - 1
    }

    /// Declares an event on every rank; returns its index.
    pub fn event(&mut self, name: &str) -> u32 {
        for r in &mut self.program.ranks {
            r.events.push(name.into());
        }
        self.program.ranks[0].events.len() as u32 - 1
    }

    /// Declares a buffer of `bytes` bytes on every rank; returns its index.
    pub fn buffer(&mut self, name: &str, bytes: u64, space: MemSpace, pooled: bool) -> u32 {
        for r in &mut self.program.ranks {
            r.buffers.push(Buffer { name: name.into(), bytes, space, pooled });
        }
        self.program.ranks[0].buffers.len() as u32 - 1
    }

    /// Adds a host thread to every rank; returns its index.
    pub fn thread(&mut self, name: &str) -> u32 {
        for r in &mut self.program.ranks {
            r.threads.push(Thread { name: name.into(), ops: vec![] });
        }
        self.program.ranks[0].threads.len() as u32 - 1
    }

    /// Adds a communicator; returns its id.
    pub fn comm(&mut self, name: &str, members: Vec<RankId>, explicit_init: bool) -> CommId {
        self.program.comms.push(Comm { name: name.into(), members, explicit_init, nonblocking: false, watchdog_ns: None });
        CommId(self.program.comms.len() as u32 - 1)
    }

    /// Appends an op to (rank, thread).
    pub fn op(&mut self, rank: RankId, thread: u32, kind: OpKind) -> &mut Self {
        self.program.ranks[rank as usize].threads[thread as usize].ops.push(Op { kind, origin: Origin::default() });
        self
    }

    /// The whole of buffer `index` of `rank`.
    pub fn whole(&self, rank: RankId, index: u32) -> BufRange {
        let b = BufRef { rank, index };
        BufRange { buf: b, offset: 0, len: self.program.buffer(b).bytes }
    }

    /// Finishes the program.
    pub fn finish(self) -> Program {
        self.program
    }
}
