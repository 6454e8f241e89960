// CO-RE accessors for every kernel-struct read sockwatch makes.
//
// Rust cannot emit CO-RE relocations, so the programs call these functions instead of reading
// fields themselves. Every field access below goes through preserve_access_index (vmlinux.h
// applies it to all records) and is relocated by the loader against the target kernel's BTF.
// Each function returns a negative value when the object is not what it looks for, so callers
// filter cheaply before touching the ring buffer.
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>

#include "shim.h"

#define SW_AF_UNIX 1
#define SW_S_IFMT 00170000
#define SW_S_IFSOCK 0140000

// Kernel dev_t (major << 20 | minor) to the encoding stat(2) reports as st_dev.
static __always_inline __u64 sw_user_dev(__u32 kdev)
{
	__u64 major = kdev >> 20, minor = kdev & 0xfffff;
	return ((major & 0xfffff000ULL) << 32) | ((major & 0xfffULL) << 8) |
	       ((minor & 0xffffff00ULL) << 12) | (minor & 0xffULL);
}

int shim_sk_bound_file(struct sock *sk, struct sw_bound_file *out)
{
	if (!sk || BPF_CORE_READ(sk, __sk_common.skc_family) != SW_AF_UNIX)
		return -1;
	struct unix_sock *u = (struct unix_sock *)sk;
	struct dentry *dentry = BPF_CORE_READ(u, path.dentry);
	if (!dentry)
		return -2; // abstract or unnamed: no file
	struct inode *inode = BPF_CORE_READ(dentry, d_inode);
	if (!inode)
		return -3;
	out->ino = BPF_CORE_READ(inode, i_ino);
	out->dev = sw_user_dev(BPF_CORE_READ(inode, i_sb, s_dev));
	out->nlink = BPF_CORE_READ(inode, __i_nlink);
	out->_pad = 0;
	// SOCK_INODE(): the sockfs inode sits next to the socket in struct socket_alloc.
	struct socket *sock = BPF_CORE_READ(sk, sk_socket);
	out->sock_ino = 0;
	if (sock) {
		struct socket_alloc *alloc =
			(void *)sock - bpf_core_field_offset(struct socket_alloc, socket);
		out->sock_ino = BPF_CORE_READ(alloc, vfs_inode.i_ino);
	}
	return 0;
}

int shim_sk_path(struct sock *sk, char *buf)
{
	struct unix_sock *u = (struct unix_sock *)sk;
	struct unix_address *addr = BPF_CORE_READ(u, addr);
	if (!addr)
		return -1;
	// name[] is a flexible array: take its offset rather than index it (loaders reject a
	// relocation that indexes a zero-length array). sun_path follows the 2-byte family (uapi).
	const char *path = (const char *)addr + bpf_core_field_offset(struct unix_address, name) + 2;
	return bpf_probe_read_kernel_str(buf, SW_SUN_PATH_LEN, path);
}

struct sock *shim_socket_sk(struct socket *sock)
{
	return sock ? BPF_CORE_READ(sock, sk) : 0;
}

struct socket *shim_current_fd_socket(int fd)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	struct fdtable *fdt = BPF_CORE_READ(task, files, fdt);
	if (!fdt || fd < 0 || (unsigned int)fd >= BPF_CORE_READ(fdt, max_fds))
		return 0;
	struct file **fds = BPF_CORE_READ(fdt, fd);
	struct file *file = 0;
	if (bpf_probe_read_kernel(&file, sizeof(file), &fds[fd]) || !file)
		return 0;
	if ((BPF_CORE_READ(file, f_inode, i_mode) & SW_S_IFMT) != SW_S_IFSOCK)
		return 0;
	return BPF_CORE_READ(file, private_data);
}
