//! Profiles: the undocumented platform behaviours the semantics is parameterized over (SEMANTICS.md: "Where a rule is
//! undocumented, the model makes it a parameter of a profile"), with the built-in profiles and RON loading.

use serde::{Deserialize, Serialize};

/// What happens when two ranks make first contact without mirroring each other's connection set-up (N7, INFER).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum NonMirrored {
    /// Each host keeps waiting for the peer to need the mirrored direction: a host-level hang (seen on hardware).
    Hang,
    /// The program is undefined (reported as *undefined* with rule N7).
    Undefined,
}

/// Semantic parameters of one platform. Every field is a behaviour that the documentation leaves open.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Profile {
    /// Name shown in reports (`portable`, `eager`, or a calibrated profile's name).
    pub name: String,
    /// One line saying where the numbers come from.
    #[serde(default)]
    pub description: String,
    /// N2: bytes a send may deliver into a connection's internal buffers with no recv running, per (communicator,
    /// source, destination) connection. 0 = rendezvous: a send ends only together with its recv.
    pub eager_bytes_per_connection: u64,
    /// N2: of that window, the bytes that are *guaranteed*: sends beyond this (up to `eager_bytes_per_connection`)
    /// may or may not complete without their recv, so the explorer also reports the executions in which the
    /// platform refuses them. Defaults to `eager_bytes_per_connection` (a window that is always available).
    #[serde(default)]
    pub eager_bytes_guaranteed: Option<u64>,
    /// S1: `true` when streams are guaranteed to progress independently. `false` (the documented guarantee) also
    /// explores executions in which a spinning NCCL kernel keeps every other item of its device from starting.
    pub independent_progress: bool,
    /// N7: `true` when P2P connections are set up lazily at the first launch that needs them, blocking the host until
    /// the peer's host sets up the mirrored direction. `false`: every connection exists once the communicator does.
    pub lazy_connect: bool,
    /// N7: what non-mirrored first contact does (only read when `lazy_connect`).
    pub nonmirrored_first_contact: NonMirrored,
    /// N5: `true` when consecutive NCCL launches on one communicator are serialized on the device (a launch starts
    /// only after the previous launch on the same communicator has ended), even on different user streams.
    pub serialize_per_comm: bool,
}

impl Profile {
    /// Only what the documentation guarantees (the default): rendezvous sends (N2), no guaranteed independent
    /// progress (S1), per-communicator serialization (N5). Host-blocking lazy connection set-up (N7) is not
    /// documented behaviour of `ncclSend`, so connections are taken to exist once the communicator does; the `eager`
    /// profile and calibrated profiles model N7.
    pub fn portable() -> Profile {
        Profile {
            name: "portable".into(),
            description: "only what the CUDA and NCCL documentation guarantee: rendezvous sends (N2), no guaranteed \
                          independent progress (S1), per-communicator serialization (N5); connections exist at init"
                .into(),
            eager_bytes_per_connection: 0,
            eager_bytes_guaranteed: None,
            independent_progress: false,
            lazy_connect: false,
            nonmirrored_first_contact: NonMirrored::Hang,
            serialize_per_comm: true,
        }
    }

    /// A typical NCCL 2.x intra-node platform: sends up to 4 MiB per connection complete without a recv (N2; the size
    /// is an estimate until a calibrated profile replaces it), streams progress independently, connections are set
    /// up lazily, launches on one communicator are serialized.
    pub fn eager() -> Profile {
        Profile {
            name: "eager".into(),
            description: "NCCL with a 4 MiB eager window per connection (N2, estimate), independent progress, lazy \
                          connection set-up (N7), per-communicator serialization (N5)"
                .into(),
            eager_bytes_per_connection: 4 << 20,
            eager_bytes_guaranteed: None,
            independent_progress: true,
            lazy_connect: true,
            nonmirrored_first_contact: NonMirrored::Hang,
            serialize_per_comm: true,
        }
    }

    /// Names of the built-in profiles.
    pub const BUILTIN: &'static [&'static str] = &["portable", "eager"];

    /// A built-in profile by name.
    pub fn builtin(name: &str) -> Option<Profile> {
        match name {
            "portable" => Some(Profile::portable()),
            "eager" => Some(Profile::eager()),
            _ => None,
        }
    }

    /// Bytes per connection that are always available to eager sends (N2).
    pub fn eager_guaranteed(&self) -> u64 {
        self.eager_bytes_guaranteed.unwrap_or(self.eager_bytes_per_connection).min(self.eager_bytes_per_connection)
    }

    /// Parses a profile written in RON.
    ///
    /// Errors: the RON error with its line and column.
    pub fn from_ron(text: &str) -> Result<Profile, ron::error::SpannedError> {
        ron::from_str(text)
    }
}

impl Default for Profile {
    fn default() -> Self {
        Profile::portable()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_round_trip_through_ron() {
        for name in Profile::BUILTIN {
            let p = Profile::builtin(name).unwrap();
            let text = ron::ser::to_string_pretty(&p, Default::default()).unwrap();
            assert_eq!(Profile::from_ron(&text).unwrap(), p);
        }
    }
}
