// Records the shim fills; mirrored by #[repr(C)] structs in src/shim.rs.
#ifndef SOCKWATCH_SHIM_H
#define SOCKWATCH_SHIM_H

#define SW_SUN_PATH_LEN 108

struct sw_bound_file {
	__u64 dev; // st_dev encoding
	__u64 ino;
	__u64 sock_ino; // sockfs inode of the bound socket
	__u32 nlink;
	__u32 _pad;
};

#endif
