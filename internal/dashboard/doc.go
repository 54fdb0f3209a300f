// Package dashboard serves the controller's web dashboard over HTTPS: a
// login by a one-time link (ctl dashboard) exchanged for a session
// cookie, and its pages (the model, a service, a unit, the operations
// and one operation, the audit log, the controllers), live, by
// server-sent events fed by the controller's watch hub. The model page's
// stream sends the whole page first and then only the rows that changed
// (rows.go, modelstream.go): a change of units' statuses alone re-reads
// those units, anything else the whole model, and streams woken by the
// same change share the read under their calls (reads.go).
//
// It owns its HTTP handlers, templates and embedded assets. It writes
// nothing to etcd itself: the links and sessions are package state's
// records, and every page and action is an OperatorService call made
// through controller.Server.CallAs as the session's user, so that the
// dashboard is authorized by the same table and audited the same way as
// ctl. It must not keep a permission rule of its own. Besides the
// sessions it reads one thing from state directly: whether a service's
// charm set its status, which a Status answer does not say and a patched
// service's row needs (modelStream.readUnits); what it shows is still
// what Status answered.
package dashboard
