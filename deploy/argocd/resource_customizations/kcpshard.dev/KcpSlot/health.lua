-- Argo CD health of a KcpSlot (kcpshard.dev/v1alpha1): one kcp process of a shard, owned by its
-- KcpShard (Argo CD shows it in the shard's tree; the shard's own health is what the app counts).
-- Its host agent reports the step conditions Seeded, Listening, Ready; the operator adds Flipped,
-- LeaseHandedOver and Probed. A slot stopped on purpose (the old one after a roll) is Suspended;
-- a kcp that exited with an error, or a failed seed, is Degraded; a ready one is Healthy.
-- Only Lua's base library is used (ipairs, tostring, `..`): Argo CD runs a check from argocd-cm with
-- base, table and a safe os only; string, math, io and the rest need resource.customizations.useOpenLibs.
local hs = {}

local function find(conditions, wanted)
  for _, condition in ipairs(conditions) do
    if condition.type == wanted then
      return condition
    end
  end
  return nil
end

local function message(condition, otherwise)
  if condition ~= nil and condition.message ~= nil and condition.message ~= "" then
    return condition.message
  end
  return otherwise
end

local status = obj.status
if status == nil or status.conditions == nil or #status.conditions == 0 then
  hs.status = "Progressing"
  hs.message = "waiting for the host agent"
  return hs
end

local seeded = find(status.conditions, "Seeded")
local ready = find(status.conditions, "Ready")

if status.exitedAt ~= nil then
  if status.exitCode == nil or status.exitCode == 0 then
    hs.status = "Suspended"
    hs.message = message(ready, "kcp stopped")
  else
    hs.status = "Degraded"
    hs.message = message(ready, "kcp exited with code " .. tostring(status.exitCode))
  end
  return hs
end

if ready ~= nil and ready.status == "False" and ready.reason == "Stopping" then
  hs.status = "Suspended"
  hs.message = message(ready, "stopping")
  return hs
end

if seeded ~= nil and seeded.status == "False" then
  hs.status = "Degraded"
  hs.message = message(seeded, "seeding the slot root failed")
  return hs
end

if ready ~= nil and ready.status == "True" then
  local flipped = find(status.conditions, "Flipped")
  hs.status = "Healthy"
  if flipped ~= nil and flipped.status == "True" then
    hs.message = message(flipped, "serving")
  else
    hs.message = message(ready, "ready")
  end
  return hs
end

for _, wanted in ipairs({ "Seeded", "Listening", "Ready" }) do
  local condition = find(status.conditions, wanted)
  if condition == nil or condition.status ~= "True" then
    hs.status = "Progressing"
    hs.message = message(condition, "waiting for " .. wanted)
    return hs
  end
end

hs.status = "Progressing"
hs.message = "starting"
return hs
