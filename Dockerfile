# govgate image: `control`, `sidecar` or `start` as its argument (docs/kubernetes.md).
# Not built in CI here (no container runtime on the build machines): see docs/kubernetes.md.
FROM node:20-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json tsconfig.json ./
COPY src ./src
RUN npm ci --ignore-scripts && npx tsc -p tsconfig.json && npm prune --omit=dev

FROM node:20-bookworm-slim
WORKDIR /app
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist/src ./dist/src
COPY package.json ./
# The reference settings and example policies, for SERVICE_CONFIG and for copying.
COPY config ./config
RUN mkdir -p /var/lib/govgate && chown node:node /var/lib/govgate
# Numeric: a pod with runAsNonRoot can only check a numeric user (node is 1000 in this image).
USER 1000:1000
ENV SERVICE_DATA_DIR=/var/lib/govgate/data SERVICE_KEYS_DIR=/var/lib/govgate/keys
EXPOSE 8620 15001
ENTRYPOINT ["node", "dist/src/cli.js"]
CMD ["start"]
