-- Argo CD health of a KcpShard (kcpshard.dev/v1alpha1).
-- The operator writes kstatus conditions (Ready, Reconciling, Stalled) and status.observedGeneration.
-- In order: a roll under way is Progressing, or Suspended while it waits for
-- `kubectl kcpshard promote`; a spec the operator has not acted on yet is Progressing (a Stalled of an
-- older generation is no verdict on it); Stalled=True is Degraded; Ready=True is Healthy.
-- `kubectl kcpshard status` judges by the same rules.
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
  hs.message = "waiting for the operator to see the shard"
  return hs
end

local ready = find(status.conditions, "Ready")
local reconciling = find(status.conditions, "Reconciling")
local stalled = find(status.conditions, "Stalled")

if reconciling ~= nil and reconciling.status == "True" then
  if reconciling.reason == "WaitingForPromotion" then
    hs.status = "Suspended"
    hs.message = message(reconciling, "waiting for promotion")
  else
    hs.status = "Progressing"
    hs.message = message(reconciling, "")
  end
  return hs
end

if status.rollout ~= nil then
  hs.status = "Progressing"
  hs.message = message(ready, "")
  return hs
end

local generation = obj.metadata.generation
if status.observedGeneration ~= nil and generation ~= nil and status.observedGeneration ~= generation then
  hs.status = "Progressing"
  hs.message = "waiting for the operator to act on generation " .. tostring(generation)
  return hs
end

if stalled ~= nil and stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = message(stalled, "")
  return hs
end

if ready ~= nil and ready.status == "True" then
  hs.status = "Healthy"
  hs.message = message(ready, "")
  return hs
end

hs.status = "Progressing"
hs.message = message(ready, "not ready yet")
return hs
