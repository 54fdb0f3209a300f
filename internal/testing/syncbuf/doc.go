// Package syncbuf is a buffer some goroutines may write to while others
// read it: for tests that collect what a logger or a child process writes
// and look at it as it comes.
package syncbuf
