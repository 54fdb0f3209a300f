package main

import (
	"encoding/binary"
	"runtime"
)

// The harness's hooks do nothing, and what a hook costs beyond that is the
// agent's: its fork and exec, the hook's pipes and environment, waiting
// for it, and the records around it. A shell script that exits 0 costs
// more than all of that together on the VMs this harness runs on: any
// program linked with the C library (or Go's runtime) asks the CPU for its
// features dozens of times as it starts, with the cpuid instruction, which
// such a hypervisor traps. Measured on the VM of docs/PERFORMANCE.md:
// one cpuid 11.2 µs; `#!/bin/sh\nexit 0` 0.93 ms of the hook's own CPU,
// /bin/true 0.84 ms, a static C program returning 0 0.74 ms, the
// program below 0.07 ms. So by default (-hooks process) a hook is the
// program below: a complete static executable whose one instruction
// besides the system call is exit(0). -hooks sh runs shell scripts
// instead, as charms' hooks often are.

// noopProgram returns a static ELF executable for this machine that exits
// 0 at once, or nil when the harness knows none for its architecture.
func noopProgram() []byte {
	switch runtime.GOARCH {
	case "amd64":
		return elfProgram(62, []byte{ // EM_X86_64
			0x31, 0xff, // xor edi, edi: status 0
			0xb8, 0x3c, 0x00, 0x00, 0x00, // mov eax, 60: exit
			0x0f, 0x05, // syscall
		})
	case "arm64":
		return elfProgram(183, []byte{ // EM_AARCH64
			0x00, 0x00, 0x80, 0xd2, // mov x0, #0: status 0
			0xa8, 0x0b, 0x80, 0xd2, // mov x8, #93: exit
			0x01, 0x00, 0x00, 0xd4, // svc #0
		})
	}
	return nil
}

// sleepProgram returns a static ELF executable for this machine that
// sleeps for seconds (nanosleep) and exits 0, ended at once by SIGTERM
// (it has no handler), or nil when the harness knows none for its
// architecture: the long action of the operations scenario, as cheap to
// start as the no-op.
func sleepProgram(seconds uint32) []byte {
	if runtime.GOARCH != "amd64" {
		return nil
	}
	code := []byte{
		0x6a, 0x00, // push 0: tv_nsec
		0x68, 0, 0, 0, 0, // push seconds: tv_sec
		0x48, 0x89, 0xe7, // mov rdi, rsp: the timespec
		0x31, 0xf6, // xor esi, esi: no remainder
		0xb8, 0x23, 0x00, 0x00, 0x00, // mov eax, 35: nanosleep
		0x0f, 0x05, // syscall
		0x31, 0xff, // xor edi, edi: status 0
		0xb8, 0x3c, 0x00, 0x00, 0x00, // mov eax, 60: exit
		0x0f, 0x05, // syscall
	}
	binary.LittleEndian.PutUint32(code[3:], seconds)
	return elfProgram(62, code)
}

// elfProgram returns a static ELF executable for machine whose code is
// code: one file header, one program header loading the whole file at
// base, readable and executable, and the code right after them.
func elfProgram(machine uint16, code []byte) []byte {
	const base, ehsize, phsize = 0x400000, 64, 56
	size := ehsize + phsize + len(code)
	b := make([]byte, ehsize+phsize, size)
	le := binary.LittleEndian
	copy(b, "\x7fELF")
	b[4], b[5], b[6] = 2, 1, 1 // 64-bit, little-endian, ELF version 1
	le.PutUint16(b[16:], 2)    // ET_EXEC
	le.PutUint16(b[18:], machine)
	le.PutUint32(b[20:], 1)                  // version
	le.PutUint64(b[24:], base+ehsize+phsize) // entry: the code
	le.PutUint64(b[32:], ehsize)             // program headers' offset
	le.PutUint16(b[52:], ehsize)
	le.PutUint16(b[54:], phsize)
	le.PutUint16(b[56:], 1) // one program header
	ph := b[ehsize:]
	le.PutUint32(ph[0:], 1)             // PT_LOAD
	le.PutUint32(ph[4:], 5)             // PF_R | PF_X
	le.PutUint64(ph[16:], base)         // virtual address
	le.PutUint64(ph[24:], base)         // physical address
	le.PutUint64(ph[32:], uint64(size)) // in the file
	le.PutUint64(ph[40:], uint64(size)) // in memory
	le.PutUint64(ph[48:], 0x1000)       // alignment
	return append(b, code...)
}
