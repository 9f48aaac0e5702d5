# The creditflow processor image (creditflow run, monitor, broker, ...): a static binary on
# distroless, running as the non-root user 65532. Without Docker, `go -C deploy run ./image`
# builds the same layout as an OCI image (docs/operations.md).
#
#   docker build --build-arg VERSION=v0.1.0 --build-arg COMMIT=$(git rev-parse HEAD) -t creditflow .
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=""
ARG COMMIT=""
ARG TARGETARCH
RUN CGO_ENABLED=0 GOOS=linux GOARCH=${TARGETARCH:-amd64} go build -trimpath \
      -ldflags "-s -w ${VERSION:+-X main.buildVersion=$VERSION} ${COMMIT:+-X main.buildCommit=$COMMIT}" \
      -o /out/creditflow ./cmd/creditflow

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/creditflow /creditflow
USER 65532:65532
WORKDIR /home/nonroot
ENTRYPOINT ["/creditflow"]
CMD ["--help"]
