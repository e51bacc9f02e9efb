// The console's entry: TanStack Query + Router under /console; pages by role.
import { QueryClient, QueryClientProvider, useQueryClient } from "@tanstack/react-query";
import {
  Link, Outlet, RouterProvider, createRootRoute, createRoute, createRouter, redirect, useNavigate, useParams,
} from "@tanstack/react-router";
import { StrictMode, useEffect } from "react";
import { createRoot } from "react-dom/client";
import { getToken, setToken } from "./api/client";
import { useMe, useToken } from "./auth";
import { Editor } from "./editor/Editor";
import { Metrics } from "./pages/Metrics";
import { Review } from "./pages/Review";
import { RunDetail, Runs } from "./pages/Runs";
import { SignIn } from "./pages/SignIn";
import { Versions } from "./pages/Versions";
import { Workflows } from "./pages/Workflows";
import "./styles.css";

function Shell() {
  const me = useMe();
  const token = useToken();
  const nav = useNavigate();
  const qc = useQueryClient();
  const role = me.data?.role ?? null;
  return (
    <>
      <header className="top">
        <span className="brand">Railflow</span>
        {token && (
          <nav aria-label="Main">
            <Link to="/">Workflows</Link>
            <Link to="/review">Review queue</Link>
            <Link to="/runs">Runs</Link>
            <Link to="/metrics">Metrics</Link>
          </nav>
        )}
        {me.data && (
          <span className="who">
            {me.data.name} <span className="role" data-testid="role">{role}</span>{" "}
            <button onClick={() => { setToken(null); qc.clear(); nav({ to: "/signin" }); }}>Sign out</button>
          </span>
        )}
      </header>
      {me.error && token ? <SessionExpired /> : <Outlet />}
    </>
  );
}

function SessionExpired() {
  useEffect(() => setToken(null), []);
  return <main className="page"><p role="alert">Your session has expired. <Link to="/signin">Sign in again</Link>.</p></main>;
}

const requireAuth = () => {
  if (!getToken()) throw redirect({ to: "/signin" });
};

const root = createRootRoute({ component: Shell });
const routes = [
  createRoute({ getParentRoute: () => root, path: "/signin", component: SignIn }),
  createRoute({ getParentRoute: () => root, path: "/", beforeLoad: requireAuth, component: Workflows }),
  createRoute({
    getParentRoute: () => root, path: "/workflows/$workflowId", beforeLoad: requireAuth,
    component: function EditorPage() {
      const { workflowId } = useParams({ strict: false }) as { workflowId: string };
      return <Editor key={workflowId} workflowId={workflowId} />;
    },
  }),
  createRoute({
    getParentRoute: () => root, path: "/workflows/$workflowId/versions", beforeLoad: requireAuth,
    component: function VersionsPage() {
      const { workflowId } = useParams({ strict: false }) as { workflowId: string };
      return <Versions workflowId={workflowId} />;
    },
  }),
  createRoute({ getParentRoute: () => root, path: "/review", beforeLoad: requireAuth, component: Review }),
  createRoute({ getParentRoute: () => root, path: "/runs", beforeLoad: requireAuth, component: Runs }),
  createRoute({
    getParentRoute: () => root, path: "/runs/$runId", beforeLoad: requireAuth,
    component: function RunPage() {
      const { runId } = useParams({ strict: false }) as { runId: string };
      return <RunDetail key={runId} runId={runId} />;
    },
  }),
  createRoute({ getParentRoute: () => root, path: "/metrics", beforeLoad: requireAuth, component: Metrics }),
];

const router = createRouter({ routeTree: root.addChildren(routes), basepath: "/console" });

declare module "@tanstack/react-router" {
  interface Register { router: typeof router }
}

const queryClient = new QueryClient({ defaultOptions: { queries: { refetchOnWindowFocus: false, retry: 1 } } });

createRoot(document.getElementById("root")!).render(
  <StrictMode>
    <QueryClientProvider client={queryClient}>
      <RouterProvider router={router} />
    </QueryClientProvider>
  </StrictMode>,
);
