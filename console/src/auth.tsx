// Who is signed in, and what a role may do (analyst < manager < admin). The server enforces
// the same rules; the console only hides what a role may not do.
import { useQuery } from "@tanstack/react-query";
import { useSyncExternalStore } from "react";
import { api, getToken, must, onToken } from "./api/client";
import type { Role } from "./model/types";

const ranks: Record<Role, number> = { analyst: 0, manager: 1, admin: 2 };

export function atLeast(role: Role | null | undefined, need: Role): boolean {
  return !!role && ranks[role] >= ranks[need];
}

export function useToken() {
  return useSyncExternalStore(onToken, getToken);
}

export function useMe() {
  const token = useToken();
  return useQuery({
    queryKey: ["me", token],
    queryFn: () => must(api.GET("/v1/auth/me")),
    enabled: !!token,
    retry: false,
    staleTime: 60_000,
  });
}
