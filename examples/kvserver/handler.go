package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
)

// maxValue bounds a value's size.
const maxValue = 1 << 20

// handler serves the store over HTTP.
type handler struct {
	s      *store
	logger *slog.Logger
}

func newHandler(s *store, logger *slog.Logger) http.Handler {
	h := &handler{s: s, logger: logger}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /keys", h.list)
	mux.HandleFunc("GET /keys/{name}", h.get)
	mux.HandleFunc("PUT /keys/{name}", h.put)
	mux.HandleFunc("DELETE /keys/{name}", h.remove)
	mux.HandleFunc("POST /keys/{name}/incr", h.incr)
	return mux
}

func (h *handler) list(w http.ResponseWriter, _ *http.Request) {
	text(w)
	for _, k := range h.s.keys() {
		fmt.Fprintln(w, k)
	}
}

func (h *handler) get(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	v, ok := h.s.get(name)
	if !ok {
		http.Error(w, "no key "+name, http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	_, _ = w.Write(v)
}

func (h *handler) put(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	v, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxValue))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			http.Error(w, fmt.Sprintf("value over %d bytes", maxValue), http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "read value: "+err.Error(), http.StatusBadRequest)
		return
	}
	if err := h.s.put(name, v); err != nil {
		h.fail(w, "put", name, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *handler) remove(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	found, err := h.s.remove(name)
	switch {
	case err != nil:
		h.fail(w, "delete", name, err)
	case !found:
		http.Error(w, "no key "+name, http.StatusNotFound)
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

// incr answers the new value, "3\n".
func (h *handler) incr(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	n, err := h.s.incr(name)
	switch {
	case errors.Is(err, errNotInteger):
		http.Error(w, err.Error(), http.StatusConflict)
	case err != nil:
		h.fail(w, "incr", name, err)
	default:
		text(w)
		fmt.Fprintln(w, n)
	}
}

func (h *handler) fail(w http.ResponseWriter, op, name string, err error) {
	h.logger.Error("request failed", "op", op, "key", name, "err", err)
	http.Error(w, strings.TrimSpace(op+" "+name+": "+err.Error()), http.StatusInternalServerError)
}

func text(w http.ResponseWriter) { w.Header().Set("Content-Type", "text/plain; charset=utf-8") }
