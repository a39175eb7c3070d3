-- Argo CD health check for gangops PolicySources (policy.ai.operator/v1).
-- It reads the kstatus conditions the controller writes:
--   Stalled=True                      -> Degraded (a revision was refused; the reason says why)
--   Ready=True, generation observed   -> Healthy
--   Reconciling=True or not observed  -> Progressing (applying, or retrying a transient error)
--   spec.suspend                      -> Suspended
-- Install it with argocd-cm.patch.yaml next to this file.
local hs = {}
if obj.spec ~= nil and obj.spec.suspend == true then
  hs.status = "Suspended"
  hs.message = "reconciliation is suspended"
  return hs
end
if obj.status == nil or obj.status.conditions == nil then
  hs.status = "Progressing"
  hs.message = "waiting for the controller"
  return hs
end
local generation = obj.metadata.generation
local observed = obj.status.observedGeneration
if generation ~= nil and observed ~= nil and observed ~= generation then
  hs.status = "Progressing"
  hs.message = "waiting for the controller to observe generation " .. generation
  return hs
end
local ready, stalled, reconciling
for _, c in ipairs(obj.status.conditions) do
  if c.type == "Ready" then
    ready = c
  elseif c.type == "Stalled" then
    stalled = c
  elseif c.type == "Reconciling" then
    reconciling = c
  end
end
if stalled ~= nil and stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = stalled.reason .. ": " .. stalled.message
  return hs
end
if ready ~= nil and ready.status == "True" then
  hs.status = "Healthy"
  hs.message = ready.message
  return hs
end
if reconciling ~= nil and reconciling.status == "True" then
  hs.status = "Progressing"
  hs.message = reconciling.message
  return hs
end
if ready ~= nil then
  hs.status = "Degraded"
  hs.message = ready.reason .. ": " .. ready.message
  return hs
end
hs.status = "Progressing"
hs.message = "waiting for the controller"
return hs
