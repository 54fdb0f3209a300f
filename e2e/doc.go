// Package e2e holds the end-to-end tests: the real ctl and lifelined binaries, the local provider, the demo charms.
package e2e
