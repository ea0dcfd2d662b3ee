# kairos-adapter container image.
#
#   docker build -t kairos-adapter .
#
#   # embedded store, kept in a named volume:
#   docker run -d -p 9201:9201 -v kairos-data:/data kairos-adapter
#
#   # Cassandra, configured by a YAML file (see examples/kairos-adapter.yml):
#   docker run -d -p 9201:9201 \
#     -v "$PWD/examples/kairos-adapter.yml:/etc/kairos-adapter/config.yml:ro" \
#     kairos-adapter --config.file=/etc/kairos-adapter/config.yml
#
# Arguments given to `docker run` replace CMD as a whole. A flag on the command
# line wins over the YAML file, which is why the container defaults live in CMD
# (replaced when you pass your own arguments) and not in ENTRYPOINT.

FROM golang:1.26 AS build
WORKDIR /src
# Modules first: this layer is rebuilt only when go.mod or go.sum change.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# A static binary (no cgo) runs on the distroless static base below.
RUN CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o /kairos-adapter . \
 && mkdir /data

# distroless/static rather than scratch: it is just as small, but ships CA
# certificates (TLS to Cassandra can use the system roots when
# --cassandra.tls.ca-file is not set), /etc/passwd with the nonroot user and
# time zone data, and it receives security updates. The :nonroot tag runs as
# uid/gid 65532; no shell is included, so there is no HEALTHCHECK here: probe
# GET /-/healthy (liveness) and GET /-/ready (readiness) from the orchestrator.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /kairos-adapter /kairos-adapter
# The embedded store's directory, owned by the user the adapter runs as. A named
# volume inherits this ownership; a bind-mounted host directory must be writable
# by uid 65532. Unused with --storage=cassandra.
COPY --from=build --chown=65532:65532 /data /data
VOLUME /data
# With / as working directory the default --storage.path=./data is /data too,
# so the store stays on the volume when your own arguments replace CMD.
WORKDIR /
USER 65532:65532
EXPOSE 9201
ENTRYPOINT ["/kairos-adapter"]
CMD ["--storage.path=/data", "--web.listen-address=:9201"]
