-- Argo CD health of crawl.example.com Proxies and ProxyPools: the kstatus rules
-- (sigs.k8s.io/cli-utils) that Flux, kpt and `kubectl wait` users rely on.
-- Argo CD assesses no custom resource by itself; this script makes it read the
-- operator's Ready, Reconciling and Stalled conditions.
local hs = {}
if obj.status == nil or obj.status.conditions == nil then
  hs.status = "Progressing"
  hs.message = "waiting for the operator's first status"
  return hs
end
if obj.metadata.generation ~= nil and obj.status.observedGeneration ~= obj.metadata.generation then
  hs.status = "Progressing"
  hs.message = "generation " .. tostring(obj.metadata.generation) .. " not observed yet"
  return hs
end
local ready = nil
for _, condition in ipairs(obj.status.conditions) do
  if condition.type == "Stalled" and condition.status == "True" then
    hs.status = "Degraded"
    hs.message = condition.message
    return hs
  end
  if condition.type == "Reconciling" and condition.status == "True" then
    hs.status = "Progressing"
    hs.message = condition.message
    return hs
  end
  if condition.type == "Ready" then
    ready = condition
  end
end
if ready ~= nil and ready.status == "True" then
  hs.status = "Healthy"
  hs.message = ready.message
  return hs
end
hs.status = "Progressing"
if ready ~= nil then
  hs.message = ready.message
else
  hs.message = "no Ready condition yet"
end
return hs
