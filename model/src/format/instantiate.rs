//! Instantiation of one expanded op for its rank and loop iteration: every interpolated name (`"act{i}"`,
//! `"s0@{stage + 1}"`), size and duration text is filled in and every rank expression (`Rank(stage + 1)`) is
//! evaluated to an integer, so that resolution sees a plain op. Errors are reported at the field that holds the
//! template.

use super::expand::Scope;
use super::expr::{interpolate, Value};
use super::issues::{Issue, Issues};
use super::span_index::field;
use super::surface::{BufArg, Duration, ExprArg, Peer, Root, SOp, SWriter, SimplePeer, Size};

/// Fills in `op` (written at `path`) for `scope`; `None` when a template failed (reported).
pub fn instantiate(op: &SOp, scope: &Scope, path: &str, issues: &mut Issues) -> Option<SOp> {
    let mut t = Filler { scope, issues, ok: true };
    let f = |name: &str| field(path, name);
    let op = match op {
        SOp::Kernel { name, stream, reads, writes, duration } => SOp::Kernel {
            name: t.text(name, &|| f("0")),
            stream: t.text(stream, &|| f("stream")),
            reads: t.bufs(reads, &|| f("reads")),
            writes: t.bufs(writes, &|| f("writes")),
            duration: duration.as_ref().map(|d| t.duration(d, &|| f("duration"))),
        },
        SOp::Memset { buf, stream } => SOp::Memset { buf: t.buf(buf, &|| f("0")), stream: t.opt(stream, &|| f("stream")) },
        SOp::Memcpy { dst, src, stream } => {
            SOp::Memcpy { dst: t.buf(dst, &|| f("dst")), src: t.buf(src, &|| f("src")), stream: t.opt(stream, &|| f("stream")) }
        }
        SOp::Record { event, stream } => SOp::Record { event: t.text(event, &|| f("0")), stream: t.text(stream, &|| f("stream")) },
        SOp::Wait { event, stream } => SOp::Wait { event: t.text(event, &|| f("0")), stream: t.text(stream, &|| f("stream")) },
        SOp::EventQuery { event } => SOp::EventQuery { event: t.text(event, &|| f("0")) },
        SOp::EventSync { event } => SOp::EventSync { event: t.text(event, &|| f("0")) },
        SOp::StreamSync { stream } => SOp::StreamSync { stream: t.text(stream, &|| f("0")) },
        SOp::StreamQuery { stream } => SOp::StreamQuery { stream: t.text(stream, &|| f("0")) },
        SOp::Sleep { duration } => SOp::Sleep { duration: t.duration(duration, &|| f("0")) },
        SOp::HostRead { buf } => SOp::HostRead { buf: t.buf(buf, &|| f("0")) },
        SOp::HostWrite { buf } => SOp::HostWrite { buf: t.buf(buf, &|| f("0")) },
        SOp::Barrier { name } => SOp::Barrier { name: t.text(name, &|| f("0")) },
        SOp::CommInit { comm } => SOp::CommInit { comm: t.text(comm, &|| f("0")) },
        SOp::Poll { comm } => SOp::Poll { comm: t.text(comm, &|| f("0")) },
        SOp::CommAbort { comm } => SOp::CommAbort { comm: t.text(comm, &|| f("0")) },
        SOp::CommFinalize { comm } => SOp::CommFinalize { comm: t.text(comm, &|| f("0")) },
        SOp::CommDestroy { comm } => SOp::CommDestroy { comm: t.text(comm, &|| f("0")) },
        SOp::CommSplit { comm, new, color, key } => SOp::CommSplit {
            comm: t.text(comm, &|| f("0")),
            new: t.opt(new, &|| f("new")),
            color: color.as_ref().map(|e| t.rank(e, &|| f("color"))),
            key: key.as_ref().map(|e| t.rank(e, &|| f("key"))),
        },
        SOp::Send { to, buf, stream, comm } => SOp::Send {
            to: t.peer(to, &|| f("to")),
            buf: t.buf(buf, &|| f("buf")),
            stream: t.text(stream, &|| f("stream")),
            comm: t.opt(comm, &|| f("comm")),
        },
        SOp::Recv { from, buf, stream, comm } => SOp::Recv {
            from: t.peer(from, &|| f("from")),
            buf: t.buf(buf, &|| f("buf")),
            stream: t.text(stream, &|| f("stream")),
            comm: t.opt(comm, &|| f("comm")),
        },
        SOp::AllReduce { buf, send, recv, stream, comm } => SOp::AllReduce {
            buf: t.opt_buf(buf, &|| f("buf")),
            send: t.opt_buf(send, &|| f("send")),
            recv: t.opt_buf(recv, &|| f("recv")),
            stream: t.text(stream, &|| f("stream")),
            comm: t.opt(comm, &|| f("comm")),
        },
        SOp::Broadcast { root: Root::Rank { rank }, buf, send, recv, stream, comm } => SOp::Broadcast {
            root: Root::Rank { rank: t.rank(rank, &|| field(&f("root"), 0)) },
            buf: t.opt_buf(buf, &|| f("buf")),
            send: t.opt_buf(send, &|| f("send")),
            recv: t.opt_buf(recv, &|| f("recv")),
            stream: t.text(stream, &|| f("stream")),
            comm: t.opt(comm, &|| f("comm")),
        },
        SOp::AllGather { send, recv, stream, comm } => SOp::AllGather {
            send: t.buf(send, &|| f("send")),
            recv: t.buf(recv, &|| f("recv")),
            stream: t.text(stream, &|| f("stream")),
            comm: t.opt(comm, &|| f("comm")),
        },
        SOp::ReduceScatter { send, recv, stream, comm } => SOp::ReduceScatter {
            send: t.buf(send, &|| f("send")),
            recv: t.buf(recv, &|| f("recv")),
            stream: t.text(stream, &|| f("stream")),
            comm: t.opt(comm, &|| f("comm")),
        },
        SOp::AllToAll { send, recv, stream, comm } => SOp::AllToAll {
            send: t.buf(send, &|| f("send")),
            recv: t.buf(recv, &|| f("recv")),
            stream: t.text(stream, &|| f("stream")),
            comm: t.opt(comm, &|| f("comm")),
        },
        SOp::Reduce { root: Root::Rank { rank }, buf, send, recv, stream, comm } => SOp::Reduce {
            root: Root::Rank { rank: t.rank(rank, &|| field(&f("root"), 0)) },
            buf: t.opt_buf(buf, &|| f("buf")),
            send: t.opt_buf(send, &|| f("send")),
            recv: t.opt_buf(recv, &|| f("recv")),
            stream: t.text(stream, &|| f("stream")),
            comm: t.opt(comm, &|| f("comm")),
        },
        SOp::Gather { root: Root::Rank { rank }, send, recv, stream, comm } => SOp::Gather {
            root: Root::Rank { rank: t.rank(rank, &|| field(&f("root"), 0)) },
            send: t.buf(send, &|| f("send")),
            recv: t.buf(recv, &|| f("recv")),
            stream: t.text(stream, &|| f("stream")),
            comm: t.opt(comm, &|| f("comm")),
        },
        SOp::Scatter { root: Root::Rank { rank }, send, recv, stream, comm } => SOp::Scatter {
            root: Root::Rank { rank: t.rank(rank, &|| field(&f("root"), 0)) },
            send: t.buf(send, &|| f("send")),
            recv: t.buf(recv, &|| f("recv")),
            stream: t.text(stream, &|| f("stream")),
            comm: t.opt(comm, &|| f("comm")),
        },
        SOp::Alloc { buf, stream } => SOp::Alloc { buf: t.text(buf, &|| f("0")), stream: t.text(stream, &|| f("stream")) },
        SOp::Free { buf } => SOp::Free { buf: t.text(buf, &|| f("0")) },
        SOp::RecordStream { buf, stream } => {
            SOp::RecordStream { buf: t.text(buf, &|| f("0")), stream: t.text(stream, &|| f("stream")) }
        }
        SOp::Expect { buf, written_by, stream } => SOp::Expect {
            buf: t.buf(buf, &|| f("0")),
            written_by: match written_by {
                SWriter::Kernel { name } => SWriter::Kernel { name: t.text(name, &|| field(&f("written_by"), 0)) },
                SWriter::HostFunc { name } => SWriter::HostFunc { name: t.text(name, &|| field(&f("written_by"), 0)) },
                SWriter::Send { buf } => SWriter::Send { buf: t.buf(buf, &|| field(&f("written_by"), 0)) },
                other => other.clone(),
            },
            stream: t.opt(stream, &|| f("stream")),
        },
        SOp::Malloc { size } => SOp::Malloc { size: t.size(size, &|| f("0")) },
        SOp::MallocHost { size } => SOp::MallocHost { size: t.size(size, &|| f("0")) },
        SOp::LoadModule { module } => SOp::LoadModule { module: t.text(module, &|| f("0")) },
        SOp::HostFunc { name, stream, reads, writes, calls_cuda, duration } => SOp::HostFunc {
            name: t.text(name, &|| f("0")),
            stream: t.text(stream, &|| f("stream")),
            reads: t.bufs(reads, &|| f("reads")),
            writes: t.bufs(writes, &|| f("writes")),
            calls_cuda: *calls_cuda,
            duration: duration.clone(),
        },
        // A skipped op never reaches here either (`format.rs` passes it by), and has nothing to fill in.
        SOp::DeviceSync | SOp::GroupStart | SOp::GroupEnd | SOp::EmptyCache | SOp::Skipped => op.clone(),
        // Control forms never reach here: expansion removed them.
        SOp::Group { .. } | SOp::OnRanks { .. } | SOp::Parity { .. } | SOp::Repeat { .. } | SOp::For { .. } | SOp::If { .. } => {
            op.clone()
        }
        // PyTorch calls never reach here either: expansion lowered them to the ops above (`torch.rs`).
        SOp::InitProcessGroup
        | SOp::DestroyProcessGroup
        | SOp::DistSend { .. }
        | SOp::DistRecv { .. }
        | SOp::Isend { .. }
        | SOp::Irecv { .. }
        | SOp::BatchIsendIrecv { .. }
        | SOp::WorkWait { .. }
        | SOp::DistAllReduce { .. }
        | SOp::DistBroadcast { .. }
        | SOp::DistAllGather { .. }
        | SOp::DistReduceScatter { .. }
        | SOp::DistAllToAllSingle { .. }
        | SOp::DistAllToAll { .. }
        | SOp::DistAllGatherList { .. }
        | SOp::DistReduceScatterList { .. }
        | SOp::DistReduce { .. }
        | SOp::DistGather { .. }
        | SOp::DistScatter { .. }
        | SOp::NewGroup { .. }
        | SOp::CudaSynchronize
        | SOp::DistBarrier
        | SOp::Empty { .. }
        | SOp::Del { .. }
        | SOp::FreeStorage { .. }
        | SOp::WithStream { .. }
        | SOp::Compute { .. }
        | SOp::RecordEvent { .. }
        | SOp::WaitEvent { .. } => op.clone(),
    };
    t.ok.then_some(op)
}

/// The path of the field being filled, made only when an issue needs it (filling a million ops would otherwise
/// format a dozen paths per op for nothing).
type Path<'p> = &'p dyn Fn() -> String;

/// Fills templates in, remembering whether one failed.
struct Filler<'s, 'e, 'a, 'i> {
    scope: &'s Scope<'e, 'a>,
    issues: &'i mut Issues,
    ok: bool,
}

impl Filler<'_, '_, '_, '_> {
    fn fail(&mut self, issue: Issue, path: Path) {
        self.ok = false;
        self.issues.push(Issue { path: path(), ..issue }.on_rank(self.scope.rank));
    }

    fn text(&mut self, s: &str, path: Path) -> String {
        match interpolate(s, &|n| self.scope.lookup(n)) {
            Ok(t) => t.into_owned(),
            Err(m) => {
                let issue = self.scope.issue(s, m);
                self.fail(issue, path);
                s.to_string()
            }
        }
    }

    fn opt(&mut self, s: &Option<String>, path: Path) -> Option<String> {
        s.as_ref().map(|s| self.text(s, path))
    }

    fn size(&mut self, s: &Size, path: Path) -> Size {
        match s {
            Size::Text(t) => Size::Text(self.text(t, path)),
            Size::Bytes(_) | Size::Invalid(_) => s.clone(),
        }
    }

    fn duration(&mut self, d: &Duration, path: Path) -> Duration {
        match d {
            Duration::Text(t) => Duration::Text(self.text(t, path)),
            Duration::Nanos(_) | Duration::Invalid(_) => d.clone(),
        }
    }

    fn buf(&mut self, b: &BufArg, path: Path) -> BufArg {
        match b {
            BufArg::Whole(n) => BufArg::Whole(self.text(n, path)),
            BufArg::Slice(n, o, l) => BufArg::Slice(
                self.text(n, &|| field(&path(), 0)),
                self.size(o, &|| field(&path(), 1)),
                self.size(l, &|| field(&path(), 2)),
            ),
        }
    }

    fn opt_buf(&mut self, b: &Option<BufArg>, path: Path) -> Option<BufArg> {
        b.as_ref().map(|b| self.buf(b, path))
    }

    fn bufs(&mut self, list: &[BufArg], path: Path) -> Vec<BufArg> {
        list.iter().enumerate().map(|(j, b)| self.buf(b, &|| super::span_index::index(&path(), j))).collect()
    }

    /// A rank expression, evaluated to an integer literal (range checks are resolution's).
    fn rank(&mut self, e: &ExprArg, path: Path) -> ExprArg {
        match self.scope.eval(e) {
            Ok(Value::Int(v)) => ExprArg::int(e.text.clone(), v),
            Ok(Value::Bool(b)) => {
                let issue = Issue::new("", format!("`{}` is a condition ({b}); a rank is a number", e.text));
                self.fail(issue, path);
                e.clone()
            }
            Err(issue) => {
                self.fail(issue, path);
                e.clone()
            }
        }
    }

    fn simple(&mut self, p: &SimplePeer, path: Path) -> SimplePeer {
        match p {
            SimplePeer::Rank { rank } => SimplePeer::Rank { rank: self.rank(rank, &|| field(&path(), 0)) },
            SimplePeer::Next | SimplePeer::Prev => p.clone(),
        }
    }

    fn peer(&mut self, p: &Peer, path: Path) -> Peer {
        match p {
            Peer::Rank { rank } => Peer::Rank { rank: self.rank(rank, &|| field(&path(), 0)) },
            Peer::Parity { even, odd } => {
                Peer::Parity { even: self.simple(even, &|| field(&path(), "even")), odd: self.simple(odd, &|| field(&path(), "odd")) }
            }
            Peer::Next | Peer::Prev => p.clone(),
        }
    }
}
