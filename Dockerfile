# A Lifeline controller image: lifelined and ctl on a slim Debian.
#   docker build -t lifeline .
#   docker run -d --name lifeline -p 17070:17070 -v lifeline:/var/lib/lifeline \
#     lifeline --advertise HOST:17070       # the address agents and ctl dial
#   docker cp lifeline:/var/lib/lifeline/client.json .   # ctl --config client.json status
# The model lives in the volume (embedded etcd, the CA, the admin's client
# config); --etcd-endpoints puts it in an external cluster instead. Machines
# are manual ones (each host runs `lifelined machine-agent`, joined with
# `ctl add-machine --manual`): the local provider's machines are processes
# on the controller's host, which a container is not meant to be.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=devel
RUN CGO_ENABLED=0 go build -trimpath \
      -ldflags "-X github.com/lifelinehq/lifeline/internal/version.version=${VERSION}" \
      -o /out/ ./cmd/lifelined ./cmd/ctl

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/lifelined /out/ctl /usr/local/bin/
VOLUME /var/lib/lifeline
EXPOSE 17070 17071
HEALTHCHECK --interval=30s --timeout=5s CMD ["/bin/bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/17071 && printf 'GET /readyz HTTP/1.0\\r\\n\\r\\n' >&3 && grep -q '200 OK' <&3"]
# Arguments given to docker run follow these (--advertise, --etcd-endpoints, ...).
ENTRYPOINT ["/usr/local/bin/lifelined", "controller", \
     "--data-dir", "/var/lib/lifeline/controller", \
     "--api-addr", "0.0.0.0:17070", \
     "--metrics-addr", "0.0.0.0:17071", \
     "--provider", "manual", \
     "--client-config", "/var/lib/lifeline/client.json"]
