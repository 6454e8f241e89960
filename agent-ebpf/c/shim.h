// Records the shim fills; mirrored by #[repr(C)] structs in src/shim.rs.
#ifndef SOCKWATCH_SHIM_H
#define SOCKWATCH_SHIM_H

#define SW_SUN_PATH_LEN 108
#define SW_PATH_CAP 256
// Mirrors of agent_common constants (a unit test in the agent checks them).
#define SW_NAME_HASH_TAIL 32
#define SW_FD_SCAN_MAX 65536
#define SW_FD_SCAN_BOUNDED 128

// A file as sockwatch identifies it.
struct sw_file {
	__u64 dev; // st_dev encoding
	__u64 ino;
	__u64 sock_ino; // sockfs inode of the bound socket (0 when not from a socket)
	__u32 nlink;
	__u32 mode;
};

#endif
