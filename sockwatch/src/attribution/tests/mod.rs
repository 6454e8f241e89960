//! Attribution against cgroup files of every layout, pod log directory names, and a fake
//! node's `/proc` and pod log root.
mod cache;
mod cgroup;
mod pods;

const UID: &str = "0e5f1c2a-7b3d-4c8e-9f10-2a3b4c5d6e7f";
const UID_SYSTEMD: &str = "0e5f1c2a_7b3d_4c8e_9f10_2a3b4c5d6e7f";
const CID: &str = "c6d003276ac8c9e54528c189b9516d81bb78fc0035f09bd80004b3b8ace0e10d";
const CID2: &str = "d9298a10d1b0735837dc4bd85dac641b0f3cef27a47e5d53a54f2f3f5b2fcffa";
const STATIC_UID: &str = "a226e9fbdfc1c8dd7e7fef4d333f86ed";
