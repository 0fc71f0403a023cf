//! The rules of the model, one variant per id of `docs/semantics.md` (the rule reference shipped with cuorder), so
//! that findings, wait-for edges and fix hints name a rule as data and render it only at the edge.

use serde::{Deserialize, Serialize};

/// A rule of `docs/semantics.md`. Every finding, wait-for edge and undefined behaviour carries the rule it follows
/// from; `cuorder explain ID` prints the rule's section.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Rule {
    /// Stream FIFO order; no guaranteed independent progress between streams.
    S1,
    /// Legacy default stream synchronization (blocking and per-thread default streams).
    S2,
    /// Event record captures the stream's work at the call; a wait binds to the latest record at the call.
    S3,
    /// Synchronize calls block the host; queries never block.
    S4,
    /// Which copies and memsets block or order the host.
    S5,
    /// A full launch queue may block any CUDA call.
    S6,
    /// Host calls that synchronize implicitly: cudaFree, cudaMalloc, cudaMallocHost, lazy module loading,
    /// CUDA_LAUNCH_BLOCKING.
    S7,
    /// Host functions on streams (`cudaLaunchHostFunc`): ordered like a kernel, may not call CUDA.
    S8,
    /// NCCL calls only enqueue work.
    N1,
    /// Eager versus rendezvous sends.
    N2,
    /// Positional matching of sends and recvs; count and type must agree.
    N3,
    /// Group semantics: nothing enqueued before the outermost group end; ops of a group progress independently.
    N4,
    /// Launches on one communicator are serialized on the device.
    N5,
    /// Operations on different communicators in one consistent order.
    N6,
    /// Lazy connection set-up per communicator; first contact may block the host.
    N7,
    /// Communicator initialization blocks until every member calls it.
    N8,
    /// Blocking communicators have no timeout; non-blocking ones and abort.
    N9,
    /// Stream operations inside an open group are enqueued at call time.
    N10,
    /// Thread safety: no concurrent NCCL calls on one device from several threads.
    N11,
    /// Non-blocking communicators: calls may return `ncclInProgress`; poll until success before the next call.
    N12,
    /// Communicator end of life: abort, finalize, destroy; no use afterwards, no reliance on aborted data.
    N13,
    /// A group's point-to-point calls may be cut into kernel plans that run one after another.
    N14,
    /// Collectives: every member takes part, in one order; a broadcast root may finish early.
    C1,
    /// ProcessGroupNCCL runs each op on an internal NCCL stream with events before and after.
    P1,
    /// ProcessGroupNCCL's communicators for point-to-point ops.
    P2,
    /// `batch_isend_irecv` is one NCCL group (events inside the group before PR 82450).
    P3,
    /// The caching allocator: blocks return to their allocation stream's pool at free.
    P4,
    /// `torch.cuda.synchronize()` waits for every stream of the device.
    P5,
    /// Value assertions: a read sees a write only if the write happens before it.
    V1,
}

impl Rule {
    /// Every rule, in the order of `docs/semantics.md`.
    pub const ALL: [Rule; 29] = [
        Rule::S1,
        Rule::S2,
        Rule::S3,
        Rule::S4,
        Rule::S5,
        Rule::S6,
        Rule::S7,
        Rule::S8,
        Rule::N1,
        Rule::N2,
        Rule::N3,
        Rule::N4,
        Rule::N5,
        Rule::N6,
        Rule::N7,
        Rule::N8,
        Rule::N9,
        Rule::N10,
        Rule::N11,
        Rule::N12,
        Rule::N13,
        Rule::N14,
        Rule::C1,
        Rule::P1,
        Rule::P2,
        Rule::P3,
        Rule::P4,
        Rule::P5,
        Rule::V1,
    ];

    /// The id as written in `docs/semantics.md` and in messages: "S1", "N10", "P4".
    pub fn id(self) -> &'static str {
        match self {
            Rule::S1 => "S1",
            Rule::S2 => "S2",
            Rule::S3 => "S3",
            Rule::S4 => "S4",
            Rule::S5 => "S5",
            Rule::S6 => "S6",
            Rule::S7 => "S7",
            Rule::S8 => "S8",
            Rule::N1 => "N1",
            Rule::N2 => "N2",
            Rule::N3 => "N3",
            Rule::N4 => "N4",
            Rule::N5 => "N5",
            Rule::N6 => "N6",
            Rule::N7 => "N7",
            Rule::N8 => "N8",
            Rule::N9 => "N9",
            Rule::N10 => "N10",
            Rule::N11 => "N11",
            Rule::N12 => "N12",
            Rule::N13 => "N13",
            Rule::N14 => "N14",
            Rule::C1 => "C1",
            Rule::P1 => "P1",
            Rule::P2 => "P2",
            Rule::P3 => "P3",
            Rule::P4 => "P4",
            Rule::P5 => "P5",
            Rule::V1 => "V1",
        }
    }

    /// The rule with this id (case-insensitive), if any.
    pub fn from_id(id: &str) -> Option<Rule> {
        Rule::ALL.into_iter().find(|r| r.id().eq_ignore_ascii_case(id.trim()))
    }

    /// The rule's section of `docs/semantics.md` (heading `## ID: Title` up to the next level-2 heading), if the
    /// document has one.
    pub fn doc(self) -> Option<&'static str> {
        section(SEMANTICS_DOC, self.id())
    }
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.id())
    }
}

/// `docs/semantics.md`, compiled in so that `cuorder explain` works from any directory.
pub const SEMANTICS_DOC: &str = include_str!("../../docs/semantics.md");

/// The section `## {id}: ...` of a Markdown document, up to the next level-2 heading.
fn section<'d>(doc: &'d str, id: &str) -> Option<&'d str> {
    let head = format!("## {id}:");
    let start = doc.match_indices(&head).map(|(i, _)| i).find(|&i| i == 0 || doc.as_bytes()[i - 1] == b'\n')?;
    let rest = &doc[start..];
    let end = rest[3..].find("\n## ").map(|e| e + 4).unwrap_or(rest.len());
    Some(rest[..end].trim_end())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rule_has_a_section_in_the_shipped_reference() {
        for r in Rule::ALL {
            let s = r.doc().unwrap_or_else(|| panic!("docs/semantics.md has no section for {r}"));
            assert!(s.starts_with(&format!("## {}:", r.id())), "{s}");
            assert!(s.lines().count() > 3, "section {r} is too short:\n{s}");
        }
    }

    #[test]
    fn ids_round_trip() {
        for r in Rule::ALL {
            assert_eq!(Rule::from_id(r.id()), Some(r));
            assert_eq!(Rule::from_id(&r.id().to_lowercase()), Some(r));
        }
        assert_eq!(Rule::from_id("X9"), None);
    }

    #[test]
    fn sections_do_not_run_into_each_other() {
        let s1 = Rule::S1.doc().unwrap();
        assert!(!s1.contains("\n## S2:"), "{s1}");
    }
}
