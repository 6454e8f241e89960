//! What the agent reads of the host, besides the kernel's probes: `/proc` ([`procfs`],
//! [`procfd`]), `NETLINK_SOCK_DIAG` ([`diag`]), mount tables ([`mounts`]), capabilities
//! ([`caps`]), `stat` ([`stat`]), the lookups that may block, run on a pool with a deadline
//! ([`lookup`]), and the clocks ([`clock`], [`wall`]). The bottom layer: it imports none of
//! the agent's other modules.
pub mod caps;
pub mod clock;
pub mod diag;
pub mod lookup;
pub mod mounts;
pub mod procfd;
pub mod procfs;
pub mod stat;
pub mod wall;
