// Command fakepkg is a package manager for tests of hostexec's exec:
// package manager: it keeps its installed packages in a JSON file
// instead of on the host. Verbs:
//
//	fakepkg query NAME...              prints "name version" for each installed
//	fakepkg install NAME[=VERSION]...  installs (the candidate version when none)
//	fakepkg remove NAME...             removes; removing an absent package fails
//
// Its environment says where and how:
//
//	FAKEPKG_DB          the JSON file of installed packages (required)
//	FAKEPKG_LOG         a file each install and remove appends a line to
//	FAKEPKG_FAIL        comma-separated names whose install or remove fails
//	FAKEPKG_CANDIDATES  comma-separated name=version candidates (default 1.0)
//	FAKEPKG_SLOW        comma-separated names whose install waits first,
//	                    holding the lock, for FAKEPKG_SLEEP (a duration)
//
// Calls are serialized by an flock on FAKEPKG_DB.lock, so concurrent
// calls are safe; the file is replaced by rename.
//
// It owns only that: a test program, never linked into the product.
package main
