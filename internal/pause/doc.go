// Package pause owns waiting for a while unless a context ends first
// (For): the one way the packages of this module sleep between attempts.
// It depends on nothing but the standard library.
package pause
