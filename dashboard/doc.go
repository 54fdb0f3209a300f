// Package dashboard serves the controller's web dashboard over HTTPS: a
// login by a one-time link (ctl dashboard) exchanged for a session
// cookie, and its pages (the model, a service, a unit, the operations
// and one operation, the audit log, the controllers), live, by
// server-sent events fed by the controller's watch hub.
//
// It owns its HTTP handlers, templates and embedded assets. It writes
// nothing to etcd itself: the links and sessions are package state's
// records, and every page and action is an OperatorService call made
// through controller.Server.CallAs as the session's user, so that the
// dashboard is authorized by the same table and audited the same way as
// ctl. It must not keep a permission rule of its own.
package dashboard
